// Prompt text that makes JSON string decoding hard, written the ways clients write it: shared
// by the scan's and the string decoder's property tests.
import fc from 'fast-check';

/**
 * Characters whose encodings are 1 to 4 UTF-8 bytes, escapes of every kind (control
 * characters among them), lone surrogates, text that looks like an escape, and a long plain run.
 */
export const HARD_PIECES = [
  'a',
  'word ',
  'é',
  '€',
  '😀',
  '\n',
  '\t',
  '\r',
  '\b',
  '\f',
  '"',
  '\\',
  '/',
  '\u0000',
  '\u0001',
  '\u001f',
  '\u007f',
  '\ud83d',
  '\ude00',
  '\\u',
  'u',
  '\\\\',
  'x'.repeat(40),
];

/** Escapes every non-ASCII UTF-16 unit as \uXXXX, in upper or lower case hex (Python's json.dumps). */
export function asciiJson(s: string, upper: boolean): string {
  return JSON.stringify(s).replace(/[\u0080-\uffff]/g, (c) => {
    const h = c.charCodeAt(0).toString(16).padStart(4, '0');
    return `\\u${upper ? h.toUpperCase() : h}`;
  });
}

/** As JSON.stringify writes a string, or with every non-ASCII unit escaped. */
export type Style = 'plain' | 'ascii-lower' | 'ascii-upper';
export const STYLES = fc.constantFrom<Style>('plain', 'ascii-lower', 'ascii-upper');

/** `content` as a JSON string literal (quotes included) in `style`. */
export function jsonString(content: string, style: Style): string {
  return style === 'plain' ? JSON.stringify(content) : asciiJson(content, style === 'ascii-upper');
}
