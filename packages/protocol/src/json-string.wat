;; JSON string contents to UTF-8, sixteen bytes at a time (WebAssembly SIMD). The source of the
;; bytes in json-string-wasm.ts: after an edit, run `pnpm --filter @kvroute/protocol gen:wasm`
;; (a test fails while the two differ). json-string.ts holds the JavaScript this is tested
;; against (JSON.parse of the string, then its UTF-8 bytes).
;;
;; Input: the raw bytes between a string's quotes, at [s, e) in memory. Plain bytes are copied
;; as they are (the caller checks that they are valid UTF-8 when $high says some byte was
;; >= 0x80); escapes are decoded as JSON.parse decodes them, and a surrogate that is not half
;; of an escaped pair becomes U+FFFD, as UTF-8 encoding of the parsed string writes it.
;; Anything JSON.parse would refuse (a control byte, a bare quote, an unknown escape, bad hex)
;; returns -1 and the caller takes its JavaScript path, whose error is the answer.
;;
;; `final` = 0 means the bytes go on past e (the caller feeds a long string in windows): an
;; escape cut by e is left for the next window ($at stops at its backslash). With `final` = 1 a
;; cut escape returns -1.
(module
  (memory (export "memory") 4)
  ;; Where the last call stopped reading (an offset in [s, e]).
  (global $at (export "at") (mut i32) (i32.const 0))
  ;; Whether the last decode copied a byte >= 0x80 (or read one in a block it stopped inside).
  (global $high (export "high") (mut i32) (i32.const 0))

  ;; The value of four hex digits at p, or -1.
  (func $hex4 (param $p i32) (result i32)
    (local $v i32) (local $i i32) (local $c i32)
    (loop $digits
      (local.set $c (i32.or (i32.load8_u (i32.add (local.get $p) (local.get $i))) (i32.const 0x20)))
      (if (i32.and (i32.ge_u (local.get $c) (i32.const 0x30)) (i32.le_u (local.get $c) (i32.const 0x39)))
        (then (local.set $c (i32.sub (local.get $c) (i32.const 0x30))))
        (else
          (if (i32.and (i32.ge_u (local.get $c) (i32.const 0x61)) (i32.le_u (local.get $c) (i32.const 0x66)))
            (then (local.set $c (i32.sub (local.get $c) (i32.const 0x57))))
            (else (return (i32.const -1))))))
      (local.set $v (i32.or (i32.shl (local.get $v) (i32.const 4)) (local.get $c)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $digits (i32.lt_u (local.get $i) (i32.const 4))))
    (local.get $v))

  ;; The code point of the \u escape at s (its backslash), a surrogate pair counted as one:
  ;; returned as cp | (raw bytes << 24), raw bytes 6 or 12; a lone surrogate gives 0xfffd.
  ;; -1: bad hex. -2: the escape runs past e, or (not final) the second half of a pair may.
  (func $uescape (param $s i32) (param $e i32) (param $final i32) (result i32)
    (local $cu i32) (local $lo i32)
    (if (i32.gt_u (i32.add (local.get $s) (i32.const 6)) (local.get $e)) (then (return (i32.const -2))))
    (local.set $cu (call $hex4 (i32.add (local.get $s) (i32.const 2))))
    (if (i32.lt_s (local.get $cu) (i32.const 0)) (then (return (i32.const -1))))
    (if (i32.eq (i32.and (local.get $cu) (i32.const 0xfc00)) (i32.const 0xd800))
      (then
        ;; A high surrogate: a pair only with a \u low surrogate right after it.
        (if (i32.gt_u (i32.add (local.get $s) (i32.const 12)) (local.get $e))
          (then
            ;; Not final, the next escape may be cut by e (or start at it): decide in the
            ;; next window.
            (if (i32.eqz (local.get $final))
              (then
                (if (i32.eq (i32.add (local.get $s) (i32.const 6)) (local.get $e))
                  (then (return (i32.const -2))))
                (if (i32.eq (i32.load8_u (i32.add (local.get $s) (i32.const 6))) (i32.const 0x5c))
                  (then (return (i32.const -2))))))
            (return (i32.or (i32.const 0xfffd) (i32.shl (i32.const 6) (i32.const 24))))))
        (if (i32.and
              (i32.eq (i32.load8_u (i32.add (local.get $s) (i32.const 6))) (i32.const 0x5c))
              (i32.eq (i32.load8_u (i32.add (local.get $s) (i32.const 7))) (i32.const 0x75)))
          (then
            (local.set $lo (call $hex4 (i32.add (local.get $s) (i32.const 8))))
            (if (i32.eq (i32.and (local.get $lo) (i32.const 0xfffffc00)) (i32.const 0xdc00))
              (then
                (return
                  (i32.or
                    (i32.add
                      (i32.const 0x10000)
                      (i32.or
                        (i32.shl (i32.sub (local.get $cu) (i32.const 0xd800)) (i32.const 10))
                        (i32.sub (local.get $lo) (i32.const 0xdc00))))
                    (i32.shl (i32.const 12) (i32.const 24))))))))
        (return (i32.or (i32.const 0xfffd) (i32.shl (i32.const 6) (i32.const 24))))))
    (if (i32.eq (i32.and (local.get $cu) (i32.const 0xfc00)) (i32.const 0xdc00))
      (then (local.set $cu (i32.const 0xfffd))))
    (i32.or (local.get $cu) (i32.shl (i32.const 6) (i32.const 24))))

  ;; The byte a one-character escape (the byte after the backslash) stands for, or -1.
  (func $simple (param $k i32) (result i32)
    (if (i32.eq (local.get $k) (i32.const 0x6e)) (then (return (i32.const 0x0a))))
    (if (i32.eq (local.get $k) (i32.const 0x22)) (then (return (i32.const 0x22))))
    (if (i32.eq (local.get $k) (i32.const 0x5c)) (then (return (i32.const 0x5c))))
    (if (i32.eq (local.get $k) (i32.const 0x74)) (then (return (i32.const 0x09))))
    (if (i32.eq (local.get $k) (i32.const 0x72)) (then (return (i32.const 0x0d))))
    (if (i32.eq (local.get $k) (i32.const 0x2f)) (then (return (i32.const 0x2f))))
    (if (i32.eq (local.get $k) (i32.const 0x62)) (then (return (i32.const 0x08))))
    (if (i32.eq (local.get $k) (i32.const 0x66)) (then (return (i32.const 0x0c))))
    (i32.const -1))

  ;; UTF-8 length of a code point.
  (func $utf8len (param $cp i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $cp) (i32.const 0x80))
      (then (i32.const 1))
      (else
        (if (result i32) (i32.lt_u (local.get $cp) (i32.const 0x800))
          (then (i32.const 2))
          (else (if (result i32) (i32.lt_u (local.get $cp) (i32.const 0x10000))
            (then (i32.const 3))
            (else (i32.const 4))))))))

  ;; Decoded UTF-8 length of [s, e) (its plain bytes counted as they are), or -1. $at: where
  ;; it stopped (e, or a cut escape's backslash when not final).
  (func (export "count") (param $s i32) (param $e i32) (param $final i32) (result i32)
    (local $n i32) (local $m i32) (local $k i32) (local $u i32) (local $bs v128)
    (local.set $bs (i8x16.splat (i32.const 0x5c)))
    (block $done
      (loop $scan
        (if (i32.le_u (i32.add (local.get $s) (i32.const 16)) (local.get $e))
          (then
            (local.set $m (i8x16.bitmask (i8x16.eq (v128.load (local.get $s)) (local.get $bs))))
            (if (i32.eqz (local.get $m))
              (then
                (local.set $n (i32.add (local.get $n) (i32.const 16)))
                (local.set $s (i32.add (local.get $s) (i32.const 16)))
                (br $scan)))
            (local.set $m (i32.ctz (local.get $m)))
            (local.set $n (i32.add (local.get $n) (local.get $m)))
            (local.set $s (i32.add (local.get $s) (local.get $m))))
          (else
            (br_if $done (i32.ge_u (local.get $s) (local.get $e)))
            (if (i32.ne (i32.load8_u (local.get $s)) (i32.const 0x5c))
              (then
                (local.set $n (i32.add (local.get $n) (i32.const 1)))
                (local.set $s (i32.add (local.get $s) (i32.const 1)))
                (br $scan)))))
        ;; An escape at s.
        (if (i32.ge_u (i32.add (local.get $s) (i32.const 1)) (local.get $e))
          (then
            (if (local.get $final) (then (return (i32.const -1))))
            (br $done)))
        (local.set $k (i32.load8_u (i32.add (local.get $s) (i32.const 1))))
        (if (i32.eq (local.get $k) (i32.const 0x75))
          (then
            (local.set $u (call $uescape (local.get $s) (local.get $e) (local.get $final)))
            (if (i32.eq (local.get $u) (i32.const -1)) (then (return (i32.const -1))))
            (if (i32.eq (local.get $u) (i32.const -2))
              (then
                (if (local.get $final) (then (return (i32.const -1))))
                (br $done)))
            (local.set $n
              (i32.add (local.get $n) (call $utf8len (i32.and (local.get $u) (i32.const 0xffffff)))))
            (local.set $s (i32.add (local.get $s) (i32.shr_u (local.get $u) (i32.const 24))))
            (br $scan)))
        (if (i32.lt_s (call $simple (local.get $k)) (i32.const 0)) (then (return (i32.const -1))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (local.set $s (i32.add (local.get $s) (i32.const 2)))
        (br $scan)))
    (global.set $at (local.get $s))
    (local.get $n))

  ;; Decodes [s, e) to d, until the output reaches `stop` (checked between blocks and escapes,
  ;; so it may pass it by up to 16 bytes; the caller leaves that room) or the input ends.
  ;; Returns the output's end, or -1. $at: where reading stopped; $high as above.
  (func (export "decode")
    (param $s i32) (param $e i32) (param $d i32) (param $stop i32) (param $final i32)
    (result i32)
    (local $v v128) (local $m i32) (local $k i32) (local $u i32) (local $cp i32)
    (local $bs v128) (local $ctl v128) (local $quote v128) (local $highs v128) (local $high i32)
    (local.set $bs (i8x16.splat (i32.const 0x5c)))
    (local.set $ctl (i8x16.splat (i32.const 0x20)))
    (local.set $quote (i8x16.splat (i32.const 0x22)))
    (block $done
      (loop $scan
        (br_if $done (i32.ge_u (local.get $d) (local.get $stop)))
        (if (i32.le_u (i32.add (local.get $s) (i32.const 16)) (local.get $e))
          (then
            (local.set $v (v128.load (local.get $s)))
            (local.set $highs (v128.or (local.get $highs) (local.get $v)))
            (local.set $m
              (i8x16.bitmask
                (v128.or
                  (v128.or
                    (i8x16.eq (local.get $v) (local.get $bs))
                    (i8x16.eq (local.get $v) (local.get $quote)))
                  (i8x16.lt_u (local.get $v) (local.get $ctl)))))
            ;; The whole block is stored; only the bytes before the first special one count.
            (v128.store (local.get $d) (local.get $v))
            (if (i32.eqz (local.get $m))
              (then
                (local.set $s (i32.add (local.get $s) (i32.const 16)))
                (local.set $d (i32.add (local.get $d) (i32.const 16)))
                (br $scan)))
            (local.set $m (i32.ctz (local.get $m)))
            (local.set $s (i32.add (local.get $s) (local.get $m)))
            (local.set $d (i32.add (local.get $d) (local.get $m))))
          (else
            (br_if $done (i32.ge_u (local.get $s) (local.get $e)))
            (local.set $k (i32.load8_u (local.get $s)))
            (if (i32.and
                  (i32.and (i32.ne (local.get $k) (i32.const 0x5c)) (i32.ne (local.get $k) (i32.const 0x22)))
                  (i32.ge_u (local.get $k) (i32.const 0x20)))
              (then
                (i32.store8 (local.get $d) (local.get $k))
                (if (i32.ge_u (local.get $k) (i32.const 0x80)) (then (local.set $high (i32.const 1))))
                (local.set $s (i32.add (local.get $s) (i32.const 1)))
                (local.set $d (i32.add (local.get $d) (i32.const 1)))
                (br $scan)))))
        ;; A control byte or a bare quote (JSON.parse refuses either here) or an escape at s.
        (if (i32.ne (i32.load8_u (local.get $s)) (i32.const 0x5c)) (then (return (i32.const -1))))
        (if (i32.ge_u (i32.add (local.get $s) (i32.const 1)) (local.get $e))
          (then
            (if (local.get $final) (then (return (i32.const -1))))
            (br $done)))
        (local.set $k (i32.load8_u (i32.add (local.get $s) (i32.const 1))))
        (if (i32.eq (local.get $k) (i32.const 0x75))
          (then
            (local.set $u (call $uescape (local.get $s) (local.get $e) (local.get $final)))
            (if (i32.eq (local.get $u) (i32.const -1)) (then (return (i32.const -1))))
            (if (i32.eq (local.get $u) (i32.const -2))
              (then
                (if (local.get $final) (then (return (i32.const -1))))
                (br $done)))
            (local.set $cp (i32.and (local.get $u) (i32.const 0xffffff)))
            (local.set $s (i32.add (local.get $s) (i32.shr_u (local.get $u) (i32.const 24))))
            (if (i32.lt_u (local.get $cp) (i32.const 0x80))
              (then
                (i32.store8 (local.get $d) (local.get $cp))
                (local.set $d (i32.add (local.get $d) (i32.const 1)))
                (br $scan)))
            (if (i32.lt_u (local.get $cp) (i32.const 0x800))
              (then
                (i32.store8 (local.get $d) (i32.or (i32.const 0xc0) (i32.shr_u (local.get $cp) (i32.const 6))))
                (i32.store8 (i32.add (local.get $d) (i32.const 1))
                  (i32.or (i32.const 0x80) (i32.and (local.get $cp) (i32.const 0x3f))))
                (local.set $d (i32.add (local.get $d) (i32.const 2)))
                (br $scan)))
            (if (i32.lt_u (local.get $cp) (i32.const 0x10000))
              (then
                (i32.store8 (local.get $d) (i32.or (i32.const 0xe0) (i32.shr_u (local.get $cp) (i32.const 12))))
                (i32.store8 (i32.add (local.get $d) (i32.const 1))
                  (i32.or (i32.const 0x80) (i32.and (i32.shr_u (local.get $cp) (i32.const 6)) (i32.const 0x3f))))
                (i32.store8 (i32.add (local.get $d) (i32.const 2))
                  (i32.or (i32.const 0x80) (i32.and (local.get $cp) (i32.const 0x3f))))
                (local.set $d (i32.add (local.get $d) (i32.const 3)))
                (br $scan)))
            (i32.store8 (local.get $d) (i32.or (i32.const 0xf0) (i32.shr_u (local.get $cp) (i32.const 18))))
            (i32.store8 (i32.add (local.get $d) (i32.const 1))
              (i32.or (i32.const 0x80) (i32.and (i32.shr_u (local.get $cp) (i32.const 12)) (i32.const 0x3f))))
            (i32.store8 (i32.add (local.get $d) (i32.const 2))
              (i32.or (i32.const 0x80) (i32.and (i32.shr_u (local.get $cp) (i32.const 6)) (i32.const 0x3f))))
            (i32.store8 (i32.add (local.get $d) (i32.const 3))
              (i32.or (i32.const 0x80) (i32.and (local.get $cp) (i32.const 0x3f))))
            (local.set $d (i32.add (local.get $d) (i32.const 4)))
            (br $scan)))
        (local.set $k (call $simple (local.get $k)))
        (if (i32.lt_s (local.get $k) (i32.const 0)) (then (return (i32.const -1))))
        (i32.store8 (local.get $d) (local.get $k))
        (local.set $s (i32.add (local.get $s) (i32.const 2)))
        (local.set $d (i32.add (local.get $d) (i32.const 1)))
        (br $scan)))
    (global.set $at (local.get $s))
    (global.set $high
      (i32.or (local.get $high) (i32.ne (i8x16.bitmask (local.get $highs)) (i32.const 0))))
    (local.get $d))
)
