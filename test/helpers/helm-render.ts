// A renderer for the subset of Helm's template language that deploy/helm/kvroute uses, so the
// chart can be rendered and validated where the helm binary cannot be installed (this
// project's CI). It is not Helm: where Helm is available, `helm template` is the reference,
// and the chart sticks to constructs both agree on. Supported:
//   actions      {{ pipeline }}, {{- / -}} whitespace trimming, {{/* comments */}},
//                if / else if / else, with / else, range (lists and maps, `$k, $v :=`),
//                define + include, `$x := pipeline`, parenthesised pipelines
//   terms        . and $ paths (.Values.a.b, $.Release.Name, $x.y), "strings", numbers,
//                true / false / nil
//   functions    default, quote, toYaml, toJson, nindent, indent, include, required, eq, ne,
//                gt, lt, and, or, not, fail, printf (%s %d %v), trunc, trimSuffix, b64enc, sha256sum, empty,
//                toString, join, int, len, hasKey, replace, lower, trim, regexSplit
//   numbers      as Helm has them: a number from values is a float64 (a JS number; printed as
//                Go's %v prints one, 1e+06 for a million), an integer literal in a template
//                and the result of int and len is an int (a JS bigint). printf's %s of a number
//                and %d of a float64 print Go's %!s(float64=2) / %!d(float64=2), and eq, ne,
//                lt, gt refuse an int against a float64 ("incompatible types for comparison").
//   objects      .Values, .Release (Name, Namespace, Service), .Chart (Name, Version,
//                AppVersion), .Files.Get
// Anything else is an error that names the template and the construct, never silent output.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import YAML from 'yaml';

export class TemplateError extends Error {}

type Node =
  | { t: 'text'; s: string }
  | { t: 'out'; p: Pipe }
  | { t: 'assign'; name: string; p: Pipe }
  | { t: 'if'; branches: { p?: Pipe; body: Node[] }[] }
  | { t: 'with'; p: Pipe; body: Node[]; els: Node[] }
  | { t: 'range'; k?: string; v?: string; p: Pipe; body: Node[]; els: Node[] };
type Term =
  | { t: 'path'; root: string; keys: string[] }
  | { t: 'lit'; v: unknown }
  | { t: 'sub'; p: Pipe }
  | { t: 'ident'; name: string };
type Cmd = Term[];
type Pipe = Cmd[];

interface Scope {
  dot: unknown;
  vars: Map<string, unknown>;
}

const truthy = (v: unknown): boolean => {
  if (v === undefined || v === null || v === false || v === 0 || v === 0n || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v).length > 0;
  return true;
};

function tokenizeAction(src: string, where: string): string[] {
  const out: string[] = [];
  const re = /\s*("(?:[^"\\]|\\.)*"|`[^`]*`|:=|\(|\)|\||,|[^\s()|,]+)/gy;
  let m: RegExpExecArray | null;
  let pos = 0;
  re.lastIndex = 0;
  // biome-ignore lint/suspicious/noAssignInExpressions: the usual regex scan
  while ((m = re.exec(src)) !== null) {
    out.push(m[1]!);
    pos = re.lastIndex;
  }
  if (src.slice(pos).trim() !== '') throw new TemplateError(`${where}: cannot read '${src}'`);
  return out;
}

function parsePipe(tokens: string[], where: string): Pipe {
  let i = 0;
  const pipe = (): Pipe => {
    const cmds: Pipe = [[]];
    while (i < tokens.length && tokens[i] !== ')') {
      const tok = tokens[i++]!;
      if (tok === '|') cmds.push([]);
      else if (tok === '(') {
        const p = pipe();
        if (tokens[i++] !== ')') throw new TemplateError(`${where}: unclosed '('`);
        cmds.at(-1)!.push({ t: 'sub', p });
      } else cmds.at(-1)!.push(term(tok));
    }
    if (cmds.some((c) => c.length === 0))
      throw new TemplateError(`${where}: empty command in pipeline`);
    return cmds;
  };
  const term = (tok: string): Term => {
    if (tok.startsWith('"')) return { t: 'lit', v: JSON.parse(tok) };
    if (tok.startsWith('`')) return { t: 'lit', v: tok.slice(1, -1) };
    // An integer literal is Go's int; one with a point is a float64.
    if (/^-?\d+$/.test(tok)) return { t: 'lit', v: BigInt(tok) };
    if (/^-?\d+\.\d+$/.test(tok)) return { t: 'lit', v: Number(tok) };
    if (tok === 'true' || tok === 'false') return { t: 'lit', v: tok === 'true' };
    if (tok === 'nil') return { t: 'lit', v: null };
    if (tok === '.') return { t: 'path', root: '.', keys: [] };
    if (tok.startsWith('.')) return { t: 'path', root: '.', keys: tok.slice(1).split('.') };
    if (tok.startsWith('$')) {
      const [root, ...keys] = tok.split('.');
      return { t: 'path', root: root!, keys };
    }
    if (/^[A-Za-z_]\w*$/.test(tok)) return { t: 'ident', name: tok };
    throw new TemplateError(`${where}: unexpected '${tok}'`);
  };
  const p = pipe();
  if (i !== tokens.length) throw new TemplateError(`${where}: unexpected ')'`);
  return p;
}

/** Parses one template file into its top-level nodes, adding its defines to `defines`. */
export function parseTemplate(src: string, name: string, defines: Map<string, Node[]>): Node[] {
  // Split into text and actions, applying the trim markers.
  const parts: ({ text: string } | { action: string; line: number })[] = [];
  const re = /\{\{(-?)\s*([\s\S]*?)\s*(-?)\}\}/g;
  let last = 0;
  let trimNext = false;
  let m: RegExpExecArray | null;
  // biome-ignore lint/suspicious/noAssignInExpressions: the usual regex scan
  while ((m = re.exec(src)) !== null) {
    let text = src.slice(last, m.index);
    if (trimNext) text = text.replace(/^\s+/, '');
    if (m[1] === '-') text = text.replace(/\s+$/, '');
    parts.push({ text });
    parts.push({ action: m[2]!, line: src.slice(0, m.index).split('\n').length });
    trimNext = m[3] === '-';
    last = re.lastIndex;
  }
  let tail = src.slice(last);
  if (trimNext) tail = tail.replace(/^\s+/, '');
  parts.push({ text: tail });

  let i = 0;
  const block = (ends: string[]): { body: Node[]; end: string } => {
    const body: Node[] = [];
    while (i < parts.length) {
      const part = parts[i++]!;
      if ('text' in part) {
        if (part.text) body.push({ t: 'text', s: part.text });
        continue;
      }
      const where = `${name}:${part.line}`;
      const a = part.action;
      if (a.startsWith('/*')) {
        if (!a.endsWith('*/')) throw new TemplateError(`${where}: unclosed comment`);
        continue;
      }
      const kw = /^(\w+)\b\s*([\s\S]*)$/.exec(a);
      const word = kw?.[1];
      const rest = kw?.[2] ?? '';
      if (word === 'end' || word === 'else') {
        if (!ends.includes(word)) throw new TemplateError(`${where}: unexpected {{ ${a} }}`);
        i--;
        parts[i] = { action: a, line: part.line };
        return { body, end: a };
      }
      if (word === 'if') {
        const branches: { p?: Pipe; body: Node[] }[] = [];
        let cond: Pipe | undefined = parsePipe(tokenizeAction(rest, where), where);
        for (;;) {
          const r = block(['end', 'else']);
          branches.push({ p: cond, body: r.body });
          const endPart = parts[i++] as { action: string };
          if (endPart.action === 'end') break;
          const elseIf = /^else\s+if\s+([\s\S]+)$/.exec(endPart.action);
          if (elseIf) cond = parsePipe(tokenizeAction(elseIf[1]!, where), where);
          else if (endPart.action === 'else') cond = undefined;
          else throw new TemplateError(`${where}: cannot read {{ ${endPart.action} }}`);
          if (cond === undefined) {
            const r2 = block(['end']);
            branches.push({ body: r2.body });
            i++;
            break;
          }
        }
        body.push({ t: 'if', branches });
      } else if (word === 'with' || word === 'range') {
        let k: string | undefined;
        let v: string | undefined;
        let expr = rest;
        const decl = /^(\$\w+)\s*(?:,\s*(\$\w+)\s*)?:=\s*([\s\S]+)$/.exec(rest);
        if (decl && word === 'range') {
          if (decl[2]) {
            k = decl[1];
            v = decl[2];
          } else v = decl[1];
          expr = decl[3]!;
        }
        const p = parsePipe(tokenizeAction(expr, where), where);
        const r = block(['end', 'else']);
        const endPart = parts[i++] as { action: string };
        let els: Node[] = [];
        if (endPart.action === 'else') {
          els = block(['end']).body;
          i++;
        } else if (endPart.action !== 'end')
          throw new TemplateError(`${where}: cannot read {{ ${endPart.action} }}`);
        body.push(
          word === 'with'
            ? { t: 'with', p, body: r.body, els }
            : { t: 'range', k, v, p, body: r.body, els },
        );
      } else if (word === 'define') {
        const defName = JSON.parse(rest.trim()) as string;
        const r = block(['end']);
        i++;
        defines.set(defName, r.body);
      } else if (word === 'template' || word === 'block') {
        throw new TemplateError(`${where}: {{ ${word} }} is not supported; use include`);
      } else {
        const assign = /^(\$\w+)\s*:?=\s*([\s\S]+)$/.exec(a);
        if (assign)
          body.push({
            t: 'assign',
            name: assign[1]!,
            p: parsePipe(tokenizeAction(assign[2]!, where), where),
          });
        else body.push({ t: 'out', p: parsePipe(tokenizeAction(a, where), where) });
      }
    }
    if (ends.length > 0) throw new TemplateError(`${name}: missing {{ end }}`);
    return { body, end: '' };
  };
  return block([]).body;
}

/** A float64 as Go's %v prints it: %g with the shortest digits. */
function goFloat(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (!Number.isFinite(n)) return n > 0 ? '+Inf' : '-Inf';
  if (n === 0) return Object.is(n, -0) ? '-0' : '0';
  // %g uses the exponent form when the exponent is below -4 or at least the precision, and
  // Go's strconv takes 6 as that precision when the digits are the shortest: 1e+06, 1e-05.
  const [mant, exp] = n.toExponential().split('e') as [string, string];
  const e = Number(exp);
  if (e < -4 || e >= 6) {
    const sign = e < 0 ? '-' : '+';
    return `${mant}e${sign}${String(Math.abs(e)).padStart(2, '0')}`;
  }
  return String(n);
}

/** What Go's fmt calls a value's type in %!verb(type=value). */
function goType(v: unknown): string {
  if (typeof v === 'bigint') return 'int';
  if (typeof v === 'number') return 'float64';
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'string') return 'string';
  if (v === undefined || v === null) return '<nil>';
  return Array.isArray(v) ? '[]interface {}' : 'map[string]interface {}';
}

function goString(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return goFloat(v);
  if (typeof v === 'bigint' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return `[${v.map(goString).join(' ')}]`;
  return `map[${Object.entries(v as Record<string, unknown>)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, x]) => `${k}:${goString(x)}`)
    .join(' ')}]`;
}

/** Go's eq, ne, lt and gt compare basic values of one kind only (ints of any size count as one). */
function comparable(name: string, a: unknown, b: unknown): void {
  const kind = (v: unknown) =>
    typeof v === 'bigint' ? 'int' : typeof v === 'number' ? 'float' : typeof v;
  const basic = (v: unknown) => ['int', 'float', 'string', 'boolean'].includes(kind(v));
  if (basic(a) && basic(b) && kind(a) !== kind(b))
    throw new TemplateError(
      `error calling ${name}: incompatible types for comparison (${goType(a)} and ${goType(b)})`,
    );
}

function printf(format: string, args: unknown[]): string {
  let k = 0;
  return format.replace(/%[sdv%]/g, (f) => {
    if (f === '%%') return '%';
    if (k >= args.length) return `%!${f[1]}(MISSING)`;
    const v = args[k++];
    if (f === '%v') return goString(v);
    if (f === '%s' && typeof v === 'string') return v;
    if (f === '%d' && typeof v === 'bigint') return String(v);
    return `%!${f[1]}(${goType(v)}=${goString(v)})`;
  });
}

function toYaml(v: unknown): string {
  if (v === undefined || v === null) return 'null';
  return YAML.stringify(v, { lineWidth: 0 }).replace(/\n$/, '');
}

export class Renderer {
  readonly defines = new Map<string, Node[]>();
  render(nodes: Node[], dot: unknown): string {
    return this.exec(nodes, { dot, vars: new Map([['$', dot]]) });
  }

  private exec(nodes: Node[], scope: Scope): string {
    let out = '';
    for (const n of nodes) {
      switch (n.t) {
        case 'text':
          out += n.s;
          break;
        case 'out':
          out += goString(this.pipe(n.p, scope));
          break;
        case 'assign':
          scope.vars.set(n.name, this.pipe(n.p, scope));
          break;
        case 'if': {
          const hit = n.branches.find((b) => !b.p || truthy(this.pipe(b.p, scope)));
          if (hit) out += this.exec(hit.body, { dot: scope.dot, vars: new Map(scope.vars) });
          break;
        }
        case 'with': {
          const v = this.pipe(n.p, scope);
          out += truthy(v)
            ? this.exec(n.body, { dot: v, vars: new Map(scope.vars) })
            : this.exec(n.els, { dot: scope.dot, vars: new Map(scope.vars) });
          break;
        }
        case 'range': {
          const v = this.pipe(n.p, scope);
          const entries: [unknown, unknown][] = Array.isArray(v)
            ? v.map((x, idx) => [idx, x])
            : v && typeof v === 'object'
              ? Object.keys(v)
                  .sort()
                  .map((k) => [k, (v as Record<string, unknown>)[k]])
              : [];
          if (entries.length === 0)
            out += this.exec(n.els, { dot: scope.dot, vars: new Map(scope.vars) });
          for (const [k, x] of entries) {
            const vars = new Map(scope.vars);
            if (n.k) vars.set(n.k, k);
            if (n.v) vars.set(n.v, x);
            out += this.exec(n.body, { dot: x, vars });
          }
          break;
        }
      }
    }
    return out;
  }

  private pipe(p: Pipe, scope: Scope): unknown {
    let prev: { v: unknown } | undefined;
    for (const cmd of p) {
      const v = this.cmd(cmd, scope, prev);
      prev = { v };
    }
    return prev?.v;
  }

  private term(t: Term, scope: Scope): unknown {
    if (t.t === 'lit') return t.v;
    if (t.t === 'sub') return this.pipe(t.p, scope);
    if (t.t === 'ident') return this.call(t.name, []);
    let v: unknown = t.root === '.' ? scope.dot : scope.vars.get(t.root);
    if (t.root !== '.' && !scope.vars.has(t.root))
      throw new TemplateError(`undefined variable ${t.root}`);
    for (const [i, k] of t.keys.entries()) {
      // Go: a missing map key is <no value> (Helm prints it as empty); a field of that is an error.
      if (v === undefined || v === null) {
        throw new TemplateError(
          `nil pointer evaluating ${t.root === '.' ? '' : t.root}${t.keys
            .slice(0, i + 1)
            .map((x) => `.${x}`)
            .join('')}`,
        );
      }
      v = (v as Record<string, unknown>)[k];
    }
    return v;
  }

  private cmd(cmd: Cmd, scope: Scope, prev: { v: unknown } | undefined): unknown {
    const head = cmd[0]!;
    if (head.t !== 'ident') {
      const v = this.term(head, scope);
      // Methods of the built-in objects (.Files.Get "name").
      if (typeof v === 'function') {
        const args = cmd.slice(1).map((a) => this.term(a, scope));
        if (prev) args.push(prev.v);
        return (v as (...x: unknown[]) => unknown)(...args);
      }
      if (cmd.length > 1 || prev) throw new TemplateError('a value cannot take arguments');
      return v;
    }
    const args = cmd.slice(1).map((a) => this.term(a, scope));
    if (prev) args.push(prev.v);
    return this.call(head.name, args);
  }

  private call(name: string, a: unknown[]): unknown {
    const s = (i: number) => goString(a[i]);
    switch (name) {
      case 'default':
        return truthy(a[1]) ? a[1] : a[0];
      case 'quote':
        return JSON.stringify(s(0));
      case 'toYaml':
        return toYaml(a[0]);
      case 'toJson':
        return JSON.stringify(a[0] ?? null, (_k, v) => (typeof v === 'bigint' ? Number(v) : v));
      case 'indent':
      case 'nindent': {
        const pad = ' '.repeat(Number(a[0]));
        const body = s(1)
          .split('\n')
          .map((l) => pad + l)
          .join('\n');
        return name === 'nindent' ? `\n${body}` : body;
      }
      case 'include': {
        const def = this.defines.get(s(0));
        if (!def) throw new TemplateError(`include: no template named "${s(0)}"`);
        return this.render(def, a[1]);
      }
      case 'fail':
        throw new TemplateError(s(0));
      case 'required':
        if (!truthy(a[1])) throw new TemplateError(s(0));
        return a[1];
      case 'eq':
        for (const x of a.slice(1)) comparable(name, a[0], x);
        return a.slice(1).some((x) => x === a[0]);
      case 'ne':
        comparable(name, a[0], a[1]);
        return a[0] !== a[1];
      case 'gt':
        comparable(name, a[0], a[1]);
        return Number(a[0]) > Number(a[1]);
      case 'lt':
        comparable(name, a[0], a[1]);
        return Number(a[0]) < Number(a[1]);
      case 'and':
        return a.find((x) => !truthy(x)) ?? a.at(-1);
      case 'or':
        return a.find((x) => truthy(x)) ?? a.at(-1);
      case 'not':
        return !truthy(a[0]);
      case 'empty':
        return !truthy(a[0]);
      case 'printf':
        return printf(s(0), a.slice(1));
      case 'trunc':
        return s(1).slice(0, Number(a[0]));
      case 'trimSuffix':
        return s(1).endsWith(s(0)) ? s(1).slice(0, -s(0).length) : s(1);
      case 'replace':
        return s(2).replaceAll(s(0), s(1));
      case 'lower':
        return s(0).toLowerCase();
      case 'trim':
        return s(0).trim();
      case 'sha256sum':
        return createHash('sha256').update(s(0)).digest('hex');
      case 'b64enc':
        return Buffer.from(s(0)).toString('base64');
      case 'toString':
        return s(0);
      case 'int':
        return BigInt(Math.trunc(Number(a[0] ?? 0)));
      case 'len':
        if (typeof a[0] === 'string') return BigInt(Buffer.byteLength(a[0]));
        if (Array.isArray(a[0])) return BigInt(a[0].length);
        if (a[0] && typeof a[0] === 'object') return BigInt(Object.keys(a[0]).length);
        throw new TemplateError(`error calling len: len of ${goType(a[0])}`);
      case 'regexSplit': {
        // Sprig's regexSplit REGEX S N (Go's Regexp.Split); only N = -1, all parts.
        if (a[2] !== -1n) throw new TemplateError('regexSplit: only n = -1 is supported');
        return s(1).split(new RegExp(s(0)));
      }
      case 'join':
        return (Array.isArray(a[1]) ? a[1] : []).map(goString).join(s(0));
      case 'hasPrefix':
        return s(1).startsWith(s(0));
      case 'dict': {
        const out: Record<string, unknown> = {};
        for (let i = 0; i + 1 < a.length; i += 2) out[s(i)] = a[i + 1];
        return out;
      }
      case 'set': {
        // Sprig's set: changes the dict in place (visible outside a range) and returns it.
        const d = a[0] as Record<string, unknown>;
        d[s(1)] = a[2];
        return d;
      }
      case 'hasKey':
        return a[0] !== null && typeof a[0] === 'object' && s(1) in (a[0] as object);
      default:
        throw new TemplateError(`function "${name}" is not supported by this renderer`);
    }
  }
}

export interface RenderOptions {
  releaseName?: string;
  namespace?: string;
  /** Deep-merged over values.yaml, as `helm template -f` does. */
  values?: Record<string, unknown>;
}

function merge(base: unknown, over: unknown): unknown {
  if (over === undefined) return base;
  if (
    base &&
    over &&
    typeof base === 'object' &&
    typeof over === 'object' &&
    !Array.isArray(base) &&
    !Array.isArray(over)
  ) {
    const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
    // null deletes a key, as `--set key=null` does in Helm.
    for (const [k, v] of Object.entries(over)) {
      if (v === null) delete out[k];
      else out[k] = merge(out[k], v);
    }
    return out;
  }
  return over;
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? listFiles(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/** Renders a chart directory: file name -> rendered text, as `helm template` prints them. */
export function renderChart(chartDir: string, opts: RenderOptions = {}): Map<string, string> {
  const chart = YAML.parse(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8')) as {
    name: string;
    version: string;
    appVersion: string;
  };
  const values = merge(
    YAML.parse(readFileSync(join(chartDir, 'values.yaml'), 'utf8')) ?? {},
    opts.values,
  ) as Record<string, unknown>;
  const files: Record<string, string> = {};
  for (const f of listFiles(chartDir)) {
    const rel = relative(chartDir, f);
    if (!rel.startsWith('templates/')) files[rel] = readFileSync(f, 'utf8');
  }
  const ctx = {
    Values: values,
    Release: {
      Name: opts.releaseName ?? 'kvroute',
      Namespace: opts.namespace ?? 'default',
      Service: 'Helm',
    },
    Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion },
    Files: {
      Get: (name: unknown) => {
        const text = files[String(name)];
        if (text === undefined)
          throw new TemplateError(`.Files.Get: no file ${String(name)} in the chart`);
        return text;
      },
    },
  };
  const renderer = new Renderer();
  const templates = listFiles(join(chartDir, 'templates')).sort();
  const parsed = templates.map((f) => ({
    name: relative(chartDir, f),
    nodes: parseTemplate(readFileSync(f, 'utf8'), relative(chartDir, f), renderer.defines),
  }));
  const out = new Map<string, string>();
  for (const { name, nodes } of parsed) {
    if (!name.endsWith('.yaml')) continue;
    const text = renderer.render(nodes, ctx);
    if (text.trim()) out.set(name, text);
  }
  return out;
}
