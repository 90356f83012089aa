;; A replay's synthetic tokens, four at a time (WebAssembly SIMD). The source of the bytes in
;; token-fill-wasm.ts: after an edit, run `pnpm --filter @kvroute/sim gen:wasm` (a test
;; fails while the two differ). token-fill.ts holds the same computation in JavaScript, the
;; reference this is tested against:
;;   token k of a block = finish(h + k * STEP), STEP = 0x9e3779b9, where
;;   finish(x) = x' = imul(x ^ (x >>> 16), 0x7feb352d); x'' = x' ^ (x' >>> 15);
;;               1 + (((x'' >>> 16) * SPAN + (((x'' & 0xffff) * SPAN) >>> 16)) >>> 16)
;; with SPAN = VOCAB - 1 = 29999 (every product and sum stays below 2^31, so 32-bit lanes give
;; the exact integers).
(module
  (memory (export "memory") 1)
  ;; Tokens [0, n) of one block into memory at byte offset p (4-byte aligned); h is the
  ;; block's mix for token 0 (its seed plus STEP).
  (func (export "fill") (param $p i32) (param $n i32) (param $h i32)
    (local $end i32)
    (local $v v128) (local $x v128) (local $out v128)
    (local $step4 v128) (local $mul v128) (local $span v128) (local $low16 v128) (local $one v128)
    (local.set $end (i32.add (local.get $p) (i32.shl (local.get $n) (i32.const 2))))
    ;; lanes: the mixes of tokens 0..3
    (local.set $v
      (i32x4.add
        (i32x4.splat (local.get $h))
        (i32x4.mul (v128.const i32x4 0 1 2 3) (i32x4.splat (i32.const 0x9e3779b9)))))
    (local.set $step4 (i32x4.splat (i32.mul (i32.const 4) (i32.const 0x9e3779b9))))
    (local.set $mul (i32x4.splat (i32.const 0x7feb352d)))
    (local.set $span (i32x4.splat (i32.const 29999)))
    (local.set $low16 (i32x4.splat (i32.const 0xffff)))
    (local.set $one (i32x4.splat (i32.const 1)))
    (block $done
      (loop $four
        (br_if $done (i32.gt_u (i32.add (local.get $p) (i32.const 16)) (local.get $end)))
        ;; finish4 written out here: a call per four tokens cost a third more time
        (local.set $x
          (i32x4.mul (v128.xor (local.get $v) (i32x4.shr_u (local.get $v) (i32.const 16))) (local.get $mul)))
        (local.set $x (v128.xor (local.get $x) (i32x4.shr_u (local.get $x) (i32.const 15))))
        (v128.store (local.get $p)
          (i32x4.add
            (local.get $one)
            (i32x4.shr_u
              (i32x4.add
                (i32x4.mul (i32x4.shr_u (local.get $x) (i32.const 16)) (local.get $span))
                (i32x4.shr_u
                  (i32x4.mul (v128.and (local.get $x) (local.get $low16)) (local.get $span))
                  (i32.const 16)))
              (i32.const 16))))
        (local.set $v (i32x4.add (local.get $v) (local.get $step4)))
        (local.set $p (i32.add (local.get $p) (i32.const 16)))
        (br $four)))
    ;; the last 0 to 3 tokens, one lane at a time
    (if (i32.lt_u (local.get $p) (local.get $end))
      (then
        (local.set $out (call $finish4 (local.get $v) (local.get $mul) (local.get $span) (local.get $low16)))
        (i32.store (local.get $p) (i32x4.extract_lane 0 (local.get $out)))
        (if (i32.lt_u (i32.add (local.get $p) (i32.const 4)) (local.get $end))
          (then (i32.store offset=4 (local.get $p) (i32x4.extract_lane 1 (local.get $out)))))
        (if (i32.lt_u (i32.add (local.get $p) (i32.const 8)) (local.get $end))
          (then (i32.store offset=8 (local.get $p) (i32x4.extract_lane 2 (local.get $out))))))))
  ;; finish() of four mixes (the loop above has it written out)
  (func $finish4 (param $v v128) (param $mul v128) (param $span v128) (param $low16 v128) (result v128)
    (local $x v128)
    (local.set $x
      (i32x4.mul (v128.xor (local.get $v) (i32x4.shr_u (local.get $v) (i32.const 16))) (local.get $mul)))
    (local.set $x (v128.xor (local.get $x) (i32x4.shr_u (local.get $x) (i32.const 15))))
    (i32x4.add
      (i32x4.splat (i32.const 1))
      (i32x4.shr_u
        (i32x4.add
          (i32x4.mul (i32x4.shr_u (local.get $x) (i32.const 16)) (local.get $span))
          (i32x4.shr_u
            (i32x4.mul (v128.and (local.get $x) (local.get $low16)) (local.get $span))
            (i32.const 16)))
        (i32.const 16)))))
