// The chart renderer (helpers/helm-render.ts) against what Helm prints for the same
// templates: the expected strings are Go text/template + Helm semantics written out by hand.
import { describe, expect, it } from 'vitest';
import { parseTemplate, Renderer, TemplateError } from './helpers/helm-render.ts';

function render(src: string, dot: unknown, extra = ''): string {
  const r = new Renderer();
  if (extra) parseTemplate(extra, 'helpers.tpl', r.defines);
  return r.render(parseTemplate(src, 't.yaml', r.defines), dot);
}

describe('helm renderer', () => {
  it('substitutes paths and trims whitespace around {{- and -}}', () => {
    expect(
      render('a: {{ .Values.x }}\nb:  {{- .Values.y -}}  \nc', { Values: { x: 1, y: 'z' } }),
    ).toBe('a: 1\nb:zc');
    expect(render('{{/* a comment */}}x', {})).toBe('x');
    expect(render('{{ .Values.missing }}|', { Values: {} })).toBe('|');
    expect(() => render('{{ .Values.missing.deeper }}', { Values: {} })).toThrow(
      /nil pointer evaluating \.Values\.missing\.deeper/,
    );
  });

  it('if / else if / else with Go truthiness (empty map, list, string, 0 are false)', () => {
    const t = '{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}';
    expect(render(t, { a: { k: 1 } })).toBe('A');
    expect(render(t, { a: {}, b: [1] })).toBe('B');
    expect(render(t, { a: [], b: 0 })).toBe('C');
    expect(render(t, { a: '', b: '' })).toBe('C');
  });

  it('with rebinds the dot and keeps $ as the root', () => {
    expect(render('{{ with .a }}{{ .b }}{{ $.c }}{{ end }}', { a: { b: 1 }, c: 2 })).toBe('12');
    expect(render('{{ with .a }}x{{ else }}none{{ end }}', { a: null })).toBe('none');
  });

  it('range over lists and over maps in key order, with $k, $v', () => {
    expect(render('{{ range .l }}[{{ . }}]{{ end }}', { l: [1, 2] })).toBe('[1][2]');
    expect(
      render('{{ range $k, $v := .m }}{{ $k }}={{ $v }};{{ end }}', { m: { b: 2, a: 1 } }),
    ).toBe('a=1;b=2;');
    expect(render('{{ range .l }}x{{ else }}empty{{ end }}', { l: [] })).toBe('empty');
  });

  it('define + include, pipelines into nindent, toYaml, quote, default, printf, trunc, trimSuffix', () => {
    const helpers =
      '{{- define "n" -}}{{ printf "%s-%s" .a .b | trunc 5 | trimSuffix "-" }}{{- end -}}' +
      '{{- define "labels" -}}x: {{ .a | quote }}\ny: {{ default "d" .none }}{{- end -}}';
    expect(render('{{ include "n" . }}', { a: 'abcd', b: 'e' }, helpers)).toBe('abcd');
    expect(render('m:\n  {{- include "labels" . | nindent 2 }}', { a: 'v' }, helpers)).toBe(
      'm:\n  x: "v"\n  y: d',
    );
    expect(render('r:\n{{ toYaml .r | indent 2 }}', { r: { limits: { cpu: 1 }, l: ['a'] } })).toBe(
      'r:\n  limits:\n    cpu: 1\n  l:\n    - a',
    );
  });

  it('comparisons, boolean functions, b64enc, sha256sum and variables', () => {
    expect(render('{{ if and .a (not .b) }}y{{ end }}', { a: 1, b: 0 })).toBe('y');
    expect(render('{{ if or .a .b }}y{{ else }}n{{ end }}', { a: 0, b: '' })).toBe('n');
    expect(render('{{ if eq .a "x" }}y{{ end }}', { a: 'x' })).toBe('y');
    expect(render('{{ .s | b64enc }}', { s: 'hi' })).toBe('aGk=');
    expect(render('{{ "" | sha256sum }}', {})).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(render('{{ $x := .a }}{{ with .b }}{{ $x }}{{ end }}', { a: 'v', b: 1 })).toBe('v');
  });

  it('numbers as Helm has them: values are float64, template integers and int / len are ints', () => {
    // A float64 prints as Go's %v: shortest digits, exponent form from 1e+06 and below 1e-4.
    const show = (x: unknown) => render('{{ .x }}', { x });
    expect([2, 30000, 123456, 0.62, 1e6, 1234567, 0.0001, 0.00001, -2.5].map(show)).toEqual([
      '2',
      '30000',
      '123456',
      '0.62',
      '1e+06',
      '1.234567e+06',
      '0.0001',
      '1e-05',
      '-2.5',
    ]);
    expect(
      render('{{ 7 }} {{ int .x }} {{ len .s }} {{ len .l }}', { x: 2.9, s: 'abc', l: [1] }),
    ).toBe('7 2 3 1');
    // printf: %v prints any value; %s of a number and %d of a float64 are Go's error strings.
    expect(render('{{ printf "%s=%v" .k .v }}', { k: 'tier', v: 2 })).toBe('tier=2');
    expect(render('{{ printf "%s=%s" .k .v }}', { k: 'tier', v: 2 })).toBe('tier=%!s(float64=2)');
    expect(render('{{ printf "%s" .b }}', { b: true })).toBe('%!s(bool=true)');
    expect(render('{{ printf "%d %d" (int .x) .x }}', { x: 3 })).toBe('3 %!d(float64=3)');
    expect(render('{{ printf "%s %s" .a }}', { a: 'x' })).toBe('x %!s(MISSING)');
    // Go compares an int with a float64 no more than Helm does.
    expect(render('{{ if gt (int .n) 1 }}y{{ end }}', { n: 2 })).toBe('y');
    expect(() => render('{{ if gt .n 1 }}y{{ end }}', { n: 2 })).toThrow(
      /incompatible types for comparison/,
    );
    expect(() => render('{{ if eq .n "2" }}y{{ end }}', { n: 2 })).toThrow(
      /incompatible types for comparison/,
    );
    expect(render('{{ if eq .n 1.5 }}y{{ end }}', { n: 1.5 })).toBe('y');
  });

  it('hasPrefix, and dict + set changing a map in place (seen after the range)', () => {
    expect(render('{{ hasPrefix "/a/" "/a/b" }} {{ hasPrefix "/a/" "/ab" }}', {})).toBe(
      'true false',
    );
    const t =
      '{{ $m := dict "n" 0 }}{{ range .l }}{{ if gt (len .) $m.n }}{{ $_ := set $m "n" (len .) }}{{ end }}{{ end }}{{ $m.n }}';
    expect(render(t, { l: ['ab', 'abcde', 'abc'] })).toBe('5');
  });

  it('regexSplit (Go Regexp.Split, all parts), trim, and eq against several values', () => {
    expect(
      render('{{ range regexSplit "[\\\\s,]+" .s -1 }}[{{ . }}]{{ end }}', { s: 'a, b c,d' }),
    ).toBe('[a][b][c][d]');
    expect(render('{{ range regexSplit "," .s -1 }}[{{ . }}]{{ end }}', { s: ',a' })).toBe('[][a]');
    expect(render('{{ .s | trim }}|', { s: '\n  x \n' })).toBe('x|');
    expect(render('{{ if eq .k "a" "b" "c" }}y{{ else }}n{{ end }}', { k: 'b' })).toBe('y');
    expect(render('{{ if eq .k "a" "b" "c" }}y{{ else }}n{{ end }}', { k: 'd' })).toBe('n');
  });

  it('refuses what it does not implement, naming it, instead of printing something wrong', () => {
    expect(() => render('{{ lookup "v1" "Pod" "" "" }}', {})).toThrow(
      /function "lookup" is not supported/,
    );
    expect(() => render('{{ template "x" . }}', {})).toThrow(TemplateError);
    expect(() => render('{{ if .a }}x', {})).toThrow(/missing \{\{ end \}\}/);
    expect(() => render('{{ include "nope" . }}', {})).toThrow(/no template named "nope"/);
    expect(() => render('{{ required "set image.tag" .tag }}', {})).toThrow('set image.tag');
    expect(() => render('{{ if not .s }}{{ fail "give s" }}{{ end }}', {})).toThrow('give s');
  });
});
