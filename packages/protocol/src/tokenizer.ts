// Routing tokenizers: the prompt as token ids, in the order the engine sees it. Two kinds:
// - approximate (default): canonical serialization + 4-byte UTF-8 groups. Cheap,
//   model-independent, stable windows; ids do not match the engine's, so a prefix window of
//   W pseudo-tokens covers ~4W bytes rather than W real tokens.
// - huggingface: a real tokenizer.json + the model's chat template from tokenizer_config.json,
//   so the router's windows line up with the engine's KV pages.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import type { ChatMessage, PromptSource } from './request.ts';
import {
  approximateText,
  approximateTokenIds,
  canonicalChatText,
  messageText,
} from './routing-text.ts';

export interface RoutingTokenizer {
  readonly kind: 'approximate' | 'huggingface';
  /** Human-readable, for the effective-config log line. */
  readonly description: string;
  /** The prompt's token ids. `ids` prompts are returned as given. */
  encodePrompt(prompt: PromptSource): Uint32Array;
  /** Plain text, no chat template (completions / generate `text`). */
  encodeText(text: string): Uint32Array;
  /** The text that is tokenized for a chat prompt (canonical serialization or rendered template). */
  chatText(messages: readonly ChatMessage[], tools?: readonly unknown[]): string;
  /** Token ids back to text (`/detokenize`); special tokens are dropped when asked. */
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
}

export interface RoutingTokenizerOptions {
  /** Hugging Face `tokenizer.json`. Omitted: the approximate tokenizer. */
  tokenizerJsonPath?: string;
  /** `tokenizer_config.json` (chat template, special tokens). Default: next to tokenizer.json. */
  tokenizerConfigPath?: string;
}

/** Synchronous: reads the files once at start-up (an 11 MB tokenizer.json loads in ~1 s). */
export function createRoutingTokenizer(opts: RoutingTokenizerOptions = {}): RoutingTokenizer {
  if (opts.tokenizerJsonPath === undefined) {
    if (opts.tokenizerConfigPath !== undefined) {
      throw new Error('tokenizerConfigPath given without tokenizerJsonPath');
    }
    return approximateTokenizer;
  }
  return createHuggingFaceTokenizer(opts.tokenizerJsonPath, opts.tokenizerConfigPath);
}

function idsOf(prompt: PromptSource, tok: RoutingTokenizer): Uint32Array {
  switch (prompt.type) {
    case 'ids':
      return Uint32Array.from(prompt.ids);
    case 'text':
      return tok.encodeText(prompt.text);
    case 'chat':
      return tok.encodeText(tok.chatText(prompt.messages, prompt.tools));
  }
}

export const approximateTokenizer: RoutingTokenizer = {
  kind: 'approximate',
  description: 'approximate (canonical chat text, UTF-8 bytes in little-endian groups of 4)',
  encodePrompt(prompt) {
    return idsOf(prompt, this);
  },
  encodeText: approximateTokenIds,
  chatText: canonicalChatText,
  // No id is special: the ids are the text's own bytes.
  decode: (ids) => approximateText(ids),
};

function readJson(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`Cannot read ${what} ${path}: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`${what} ${path} is not valid JSON: ${(err as Error).message}`);
  }
}

/** Special tokens in tokenizer_config.json are strings or AddedToken objects `{content}`. */
function tokenString(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') {
    return (v as { content: string }).content;
  }
  return undefined;
}

/** `chat_template` is a string, or a list of `{name, template}` (default / tool_use). */
function pickTemplates(raw: unknown): { plain?: string; tools?: string } {
  if (typeof raw === 'string') return { plain: raw, tools: raw };
  if (!Array.isArray(raw)) return {};
  const byName = new Map<string, string>();
  for (const t of raw) {
    if (t && typeof t.name === 'string' && typeof t.template === 'string') {
      byName.set(t.name, t.template);
    }
  }
  const plain = byName.get('default') ?? [...byName.values()][0];
  return { plain, tools: byName.get('tool_use') ?? plain };
}

function createHuggingFaceTokenizer(jsonPath: string, configPath?: string): RoutingTokenizer {
  const tokenizerJson = readJson(jsonPath, 'tokenizer.json');
  const cfgPath = configPath ?? join(dirname(jsonPath), 'tokenizer_config.json');
  const config =
    configPath !== undefined || existsSync(cfgPath)
      ? readJson(cfgPath, 'tokenizer_config.json')
      : {};
  const tokenizer = new Tokenizer(tokenizerJson, config);
  const templates = pickTemplates(config.chat_template);
  const compiled = new Map<string, Template>();
  const compile = (src: string): Template => {
    let t = compiled.get(src);
    if (!t) {
      t = new Template(src);
      compiled.set(src, t);
    }
    return t;
  };
  const specials: Record<string, string> = {};
  for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
    const s = tokenString(config[key]);
    if (s !== undefined) specials[key] = s;
  }

  const tok: RoutingTokenizer = {
    kind: 'huggingface',
    description: `huggingface (${jsonPath}${templates.plain ? ', chat template from tokenizer_config.json' : ', no chat template: canonical chat text'})`,
    encodePrompt(prompt) {
      if (prompt.type !== 'chat') return idsOf(prompt, tok);
      // Chat text carries its own special tokens: encode it without adding more (as
      // transformers' apply_chat_template(tokenize=True) does).
      const text = tok.chatText(prompt.messages, prompt.tools);
      return Uint32Array.from(tokenizer.encode(text, { add_special_tokens: false }).ids);
    },
    encodeText(text) {
      // Plain prompts get what the engine's encode() adds by default (nothing for Qwen, BOS
      // for Llama).
      return Uint32Array.from(tokenizer.encode(text).ids);
    },
    decode(ids, opts) {
      return tokenizer.decode([...ids], { skip_special_tokens: opts?.skipSpecialTokens ?? false });
    },
    chatText(messages, tools) {
      const hasTools = Array.isArray(tools) && tools.length > 0;
      const src = hasTools ? templates.tools : templates.plain;
      if (src === undefined) return canonicalChatText(messages, tools);
      return compile(src).render({
        ...specials,
        messages: messages.map(templateMessage),
        ...(hasTools ? { tools } : {}),
        add_generation_prompt: true,
      });
    },
  };
  return tok;
}

/**
 * Templates written for transformers expect string content: content parts are flattened
 * to their text joined with "\n" (as vLLM does for text-only models) and null becomes "".
 */
function templateMessage(msg: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { ...msg, content: messageText(msg.content) };
  if (msg.tool_calls === null) delete out.tool_calls;
  return out;
}
