// The canonical serialization of a chat request for the approximate routing tokenizer.
// It only has to be stable and prefix-preserving: a later turn of the same
// conversation must serialize to an extension of the earlier turn's text, so the
// earlier turn's token windows are a prefix of the later one's. The Python GPU worker
// reimplements this byte for byte; test/fixtures/routing-tokenizer.json pins it.
import type { ChatContentPart, ChatMessage } from './request.ts';

/** A message's text: string content, or its `text` parts joined with "\n"; null/missing -> "". */
export function messageText(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const texts: string[] = [];
  for (const part of content as ChatContentPart[]) {
    if (part && part.type === 'text' && typeof part.text === 'string') texts.push(part.text);
  }
  return texts.join('\n');
}

/**
 * tools, then each message as role + text (+ tool_calls), then the generation prompt:
 *
 *   <|tools|>\n{JSON tools}\n          (only if tools is a non-empty array)
 *   <|{role}|>\n{text}\n               (each message)
 *   <|tool_calls|>{JSON tool_calls}\n  (after a message that has tool_calls)
 *   <|assistant|>\n
 */
export function canonicalChatText(messages: readonly ChatMessage[], tools?: unknown): string {
  let out = '';
  if (Array.isArray(tools) && tools.length > 0) out += `<|tools|>\n${JSON.stringify(tools)}\n`;
  for (const msg of messages) {
    out += `<|${msg.role}|>\n${messageText(msg.content)}\n`;
    if (msg.tool_calls !== undefined && msg.tool_calls !== null) {
      out += `<|tool_calls|>${JSON.stringify(msg.tool_calls)}\n`;
    }
  }
  return `${out}<|assistant|>\n`;
}

const encoder = new TextEncoder();
export const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * The approximate tokenizer's ids of the UTF-8 bytes buf[0, length), on a little-endian
 * machine: the last group is zero-padded in place (`buf` must have room for it) and the bytes
 * are viewed as uint32, not copied. `buf` must start 4-byte aligned (allocUnsafeSlow never
 * hands out a slice of the shared pool, so its buffers start at offset 0).
 */
export function idsOfUtf8(buf: Buffer, length: number): Uint32Array {
  const padded = (length + 3) & ~3;
  buf.fill(0, length, padded);
  return new Uint32Array(buf.buffer, buf.byteOffset, padded / 4);
}

/**
 * The approximate tokenizer: UTF-8 bytes in groups of 4, each group read as a
 * little-endian uint32, the last group zero-padded. Any byte change moves at most one
 * pseudo-token, and a text that extends another yields ids that extend the other's
 * (except the shorter text's zero-padded last group), which is what prefix routing needs.
 */
export function approximateTokenIds(text: string): Uint32Array {
  if (LITTLE_ENDIAN) {
    // Encode the UTF-8 bytes straight into a buffer of whole groups and view it as uint32: no
    // per-byte loop runs (~4x faster on 100 KB prompts, which matters on the router's hot
    // path) and no intermediate copy is made. Not zeroed first (Buffer.alloc's zero fill was
    // ~10% of a 120 KB body's scan): every byte is written, the text and then the padding.
    const length = Buffer.byteLength(text, 'utf8');
    const buf = Buffer.allocUnsafeSlow((length + 3) & ~3);
    buf.write(text, 0, length, 'utf8');
    return idsOfUtf8(buf, length);
  }
  const bytes = encoder.encode(text);
  const n = Math.ceil(bytes.length / 4);
  const ids = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const o = i * 4;
    ids[i] =
      ((bytes[o] ?? 0) | ((bytes[o + 1] ?? 0) << 8) | ((bytes[o + 2] ?? 0) << 16)) +
      (bytes[o + 3] ?? 0) * 0x1000000;
  }
  return ids;
}

const utf8 = new TextDecoder('utf-8');

/**
 * The text of approximate-tokenizer ids (`/detokenize`): each id's four bytes, little-endian,
 * read as UTF-8, the last group's zero padding dropped. Ids that no text produced (a model's
 * own ids, or a cut in the middle of a character) decode with U+FFFD where the bytes are not
 * UTF-8, as a real tokenizer decodes a partial character.
 */
export function approximateText(ids: ArrayLike<number>): string {
  const bytes = new Uint8Array(ids.length * 4);
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    const o = i * 4;
    bytes[o] = id & 0xff;
    bytes[o + 1] = (id >>> 8) & 0xff;
    bytes[o + 2] = (id >>> 16) & 0xff;
    bytes[o + 3] = (id >>> 24) & 0xff;
  }
  let end = bytes.length;
  // Only the last group carries padding: at most three zero bytes.
  for (let k = 0; k < 3 && end > 0 && bytes[end - 1] === 0; k++) end--;
  return utf8.decode(bytes.subarray(0, end));
}
