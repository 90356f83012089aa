// What ships under deploy/: the Helm chart rendered (helpers/helm-render.ts; Helm itself
// cannot be installed here) and validated against the Kubernetes and Prometheus Operator
// schemas (kubernetes-models), the router config it writes accepted by the router's own
// parser, the alert rules and dashboard queries checked by promtool, a live /metrics checked
// by `promtool check metrics`, and the Dockerfiles' bundles built and run.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { envName, OPTIONS, resolveConfig, SHUTDOWN_GRACE_MS, startRouter } from '@kvroute/router';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { afterAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { renderChart } from './helpers/helm-render.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const chartDir = join(root, 'deploy/helm/kvroute');
const alertsFile = join(chartDir, 'files/alerts.yaml');
const dashboardFile = join(chartDir, 'files/dashboard.json');
const work = mkdtempSync(join(tmpdir(), 'kvroute-deploy-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

// biome-ignore lint/suspicious/noExplicitAny: one validating constructor per kind
const MODELS: Record<string, new (o: any) => { validate(): void }> = {
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/ServiceAccount': ServiceAccount,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

// biome-ignore lint/suspicious/noExplicitAny: rendered manifests are checked by schema, then read loosely
type Manifest = any;

function render(values: Record<string, unknown> = {}, releaseName = 'prod'): Manifest[] {
  const out: Manifest[] = [];
  for (const [file, text] of renderChart(chartDir, {
    releaseName,
    namespace: 'llm',
    values,
  })) {
    for (const doc of YAML.parseAllDocuments(text)) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}\n${text}`);
      const m = doc.toJS() as Manifest;
      if (m) out.push(m);
    }
  }
  return out;
}

function validate(manifests: Manifest[]): void {
  for (const m of manifests) {
    const Model = MODELS[`${m.apiVersion}/${m.kind}`];
    expect(Model, `no schema for ${m.apiVersion} ${m.kind}`).toBeDefined();
    expect(() => new Model!(m).validate(), `${m.kind} ${m.metadata?.name}`).not.toThrow();
    expect(m.metadata.namespace).toBeDefined();
  }
}

const byKind = (ms: Manifest[], kind: string): Manifest[] => ms.filter((m) => m.kind === kind);
const one = (ms: Manifest[], kind: string): Manifest => {
  const found = byKind(ms, kind);
  expect(found, kind).toHaveLength(1);
  return found[0];
};

function promtool(args: string[], input?: string): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { encoding: 'utf8', input });
  if (r.error)
    throw new Error(`promtool could not run (Debian package prometheus): ${r.error.message}`);
  return { status: r.status, out: r.stdout + r.stderr };
}

/** `promtool test rules` of one test group over these rule files. */
function promtoolTest(name: string, ruleFiles: string[], test: Record<string, unknown>) {
  const file = join(work, `${name}.test.yaml`);
  writeFileSync(
    file,
    YAML.stringify({ rule_files: ruleFiles, evaluation_interval: '1m', tests: [test] }),
  );
  return promtool(['test', 'rules', file]);
}

/** The name of the volume whose mount holds `path`, if that mount is writable. */
function writableMountOf(pod: Manifest, path: string): string | undefined {
  const mounts = (pod.containers[0].volumeMounts as Manifest[])
    .filter((m) => path.startsWith(`${m.mountPath.replace(/\/$/, '')}/`))
    .sort((a, b) => b.mountPath.length - a.mountPath.length);
  return mounts[0] && !mounts[0].readOnly ? mounts[0].name : undefined;
}

/**
 * The router config the chart's ConfigMap and Deployment env give the container: values from
 * the chart's own Secret decoded, from another Secret a placeholder, from a field its path.
 */
function containerConfig(ms: Manifest[]) {
  const cm = byKind(ms, 'ConfigMap').find((m) => m.data?.['config.yaml'] !== undefined);
  const container = one(ms, 'Deployment').spec.template.spec.containers[0];
  const secrets = byKind(ms, 'Secret');
  const env: Record<string, string> = {};
  for (const e of container.env) {
    const ref = e.valueFrom?.secretKeyRef;
    const own = ref && secrets.find((x) => x.metadata.name === ref.name)?.data?.[ref.key];
    env[e.name] =
      e.value ??
      (own !== undefined
        ? Buffer.from(own, 'base64').toString()
        : ref
          ? `from-secret-${ref.key}`
          : `field-${e.valueFrom.fieldRef.fieldPath}`);
  }
  const args: string[] = container.args;
  expect(args).toEqual(['--config', '/etc/kvroute/config.yaml']);
  return resolveConfig(args, env, (path) => {
    expect(path).toBe('/etc/kvroute/config.yaml');
    return cm.data['config.yaml'];
  });
}

describe('Helm chart', () => {
  it('renders with default values into valid Kubernetes objects', () => {
    const ms = render();
    validate(ms);
    expect(ms.map((m) => m.kind).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'PodDisruptionBudget',
      'Role',
      'RoleBinding',
      'Service',
      'ServiceAccount',
    ]);
    const dep = one(ms, 'Deployment');
    const pod = dep.spec.template;
    const c = pod.spec.containers[0];
    expect(dep.metadata.name).toBe('prod-kvroute');
    expect(dep.spec.replicas).toBe(2);
    expect(dep.spec.selector.matchLabels).toEqual(pod.metadata.labels);
    expect(c.livenessProbe.httpGet).toEqual({ path: '/liveness', port: 'http' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readiness', port: 'http' });
    expect(c.resources.requests).toEqual({ cpu: '500m', memory: '256Mi' });
    expect(c.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
    });
    expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    expect(pod.metadata.annotations['checksum/config']).toMatch(/^[0-9a-f]{64}$/);
    // The Service and the PDB select exactly the router pods.
    expect(one(ms, 'Service').spec.selector).toEqual(dep.spec.selector.matchLabels);
    expect(one(ms, 'PodDisruptionBudget').spec.selector.matchLabels).toEqual(
      dep.spec.selector.matchLabels,
    );
    expect(one(ms, 'Service').spec.ports[0]).toMatchObject({ port: 30000, targetPort: 'http' });
    // Discovery: read-only pod access in the watched namespace, bound to the pod's account.
    expect(one(ms, 'Role').rules).toEqual([
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    ]);
    expect(one(ms, 'RoleBinding').subjects[0].name).toBe(pod.spec.serviceAccountName);
    expect(one(ms, 'ServiceAccount').metadata.name).toBe(pod.spec.serviceAccountName);
    // No Secret, so nothing to roll the pods on.
    expect(pod.metadata.annotations['checksum/secret']).toBeUndefined();
  });

  it('the PodDisruptionBudget lets drains evict unready routers, and is left out with one replica', () => {
    // Readiness needs a healthy worker: with the workers down every router is unready, and
    // the default IfHealthyBudget policy would then refuse to evict any of them.
    const pdb = one(render(), 'PodDisruptionBudget');
    expect(pdb.spec).toMatchObject({ minAvailable: 1, unhealthyPodEvictionPolicy: 'AlwaysAllow' });
    expect(one(render({ replicaCount: 3 }), 'PodDisruptionBudget').spec.minAvailable).toBe(1);
    // One replica with minAvailable 1 would block every eviction for good.
    const single = render({ replicaCount: 1 });
    validate(single);
    expect(byKind(single, 'PodDisruptionBudget')).toEqual([]);
    expect(
      byKind(render({ podDisruptionBudget: { enabled: false } }), 'PodDisruptionBudget'),
    ).toEqual([]);
  });

  it('a preStop sleep keeps the router serving until its endpoint is gone, within the grace period', () => {
    const pod = one(render(), 'Deployment').spec.template.spec;
    const sleep = pod.containers[0].lifecycle.preStop.exec.command as string[];
    expect(sleep[0]).toBe('sleep');
    const seconds = Number(sleep[1]);
    expect(seconds).toBeGreaterThanOrEqual(3);
    // SIGTERM closes the listener and waits for in-flight responses up to the router's grace.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(
      seconds + SHUTDOWN_GRACE_MS / 1000,
    );
    // The image has a `sleep` to run: Debian's node image, not a distroless one.
    expect(readFileSync(join(root, 'deploy/docker/router.Dockerfile'), 'utf8')).toMatch(
      /^ARG NODE_IMAGE=node:\d+-bookworm-slim$/m,
    );
    const off = one(render({ preStopSleepSeconds: 0 }), 'Deployment');
    expect(off.spec.template.spec.containers[0].lifecycle).toBeUndefined();
  });

  it('writes a router config the router accepts: discovery by label, JSON logs, all interfaces', () => {
    const cfg = containerConfig(render());
    expect(cfg).toMatchObject({
      host: '0.0.0.0',
      port: 30000,
      serviceDiscovery: true,
      selector: ['app=sglang'],
      serviceDiscoveryPort: 30000,
      serviceDiscoveryNamespace: 'llm',
      loadBalanceMethod: 'cache_aware',
      loadPollIntervalMs: 1000,
      logFormat: 'json',
    });
    expect(cfg.adminToken).toBeUndefined();
  });

  it('with every option on: Secret for the token, ServiceMonitor, PrometheusRule, dashboard, static workers', () => {
    const ms = render({
      replicaCount: 3,
      image: { repository: 'registry.example/kvroute-router', tag: '0.1.0' },
      router: {
        workerUrls: ['http://sglang-0.sglang:30000', 'http://sglang-1.sglang:30000'],
        config: { 'load-balance-method': 'prefix_match', 'prefix-window': 256 },
      },
      discovery: { enabled: false },
      adminToken: { value: 's3cret' },
      apiKey: { value: 'client-key-0001, client-key-0002' },
      serviceMonitor: { enabled: true, labels: { release: 'kube-prometheus-stack' } },
      prometheusRule: { enabled: true, predictedHitRate: 0.62 },
      grafanaDashboard: { enabled: true },
    });
    validate(ms);
    expect(byKind(ms, 'Role')).toEqual([]);
    const dep = one(ms, 'Deployment');
    expect(dep.spec.replicas).toBe(3);
    expect(dep.spec.template.spec.containers[0].image).toBe(
      'registry.example/kvroute-router:0.1.0',
    );
    expect(dep.spec.template.spec.automountServiceAccountToken).toBe(false);
    const secret = one(ms, 'Secret');
    expect(Buffer.from(secret.data['admin-token'], 'base64').toString()).toBe('s3cret');
    const tokenEnv = dep.spec.template.spec.containers[0].env.find(
      (e: Manifest) => e.name === 'KVROUTE_ADMIN_TOKEN',
    );
    expect(tokenEnv.valueFrom.secretKeyRef).toEqual({
      name: secret.metadata.name,
      key: 'admin-token',
    });
    // Several keys in one Secret value: the router splits KVROUTE_API_KEY on spaces and commas.
    expect(Buffer.from(secret.data['api-key'], 'base64').toString()).toBe(
      'client-key-0001, client-key-0002',
    );
    const keyEnv = dep.spec.template.spec.containers[0].env.find(
      (e: Manifest) => e.name === 'KVROUTE_API_KEY',
    );
    expect(keyEnv.valueFrom.secretKeyRef).toEqual({ name: secret.metadata.name, key: 'api-key' });
    const cfg = containerConfig(ms);
    expect(cfg.apiKeys).toEqual(['client-key-0001', 'client-key-0002']);
    expect(cfg.adminToken).toBe('s3cret');
    expect(cfg).toMatchObject({
      serviceDiscovery: false,
      loadBalanceMethod: 'prefix_match',
      // The old `prefix-window` spelling still resolves, to the method option it now names.
      methodOptions: { window: 256 },
      workerUrls: ['http://sglang-0.sglang:30000', 'http://sglang-1.sglang:30000'],
    });
    const sm = one(ms, 'ServiceMonitor');
    expect(sm.metadata.labels.release).toBe('kube-prometheus-stack');
    expect(sm.spec.endpoints).toEqual([{ port: 'http', path: '/metrics', interval: '15s' }]);
    expect(sm.spec.selector.matchLabels).toEqual(
      one(ms, 'Service').metadata.labels['app.kubernetes.io/name'] && dep.spec.selector.matchLabels,
    );
    const dash = byKind(ms, 'ConfigMap').find((m) => m.metadata.name.endsWith('-dashboard'));
    expect(dash.metadata.labels.grafana_dashboard).toBe('1');
    expect(JSON.parse(dash.data['kvroute.json'])).toEqual(
      JSON.parse(readFileSync(dashboardFile, 'utf8')),
    );
  });

  it("the PrometheusRule carries the alert file plus this release's prediction, labelled with its job", () => {
    const ms = render({
      serviceMonitor: { enabled: true },
      prometheusRule: { enabled: true, predictedHitRate: 0.62 },
    });
    const rule = one(ms, 'PrometheusRule');
    const groups = rule.spec.groups as {
      name: string;
      rules: { record?: string; expr: string }[];
    }[];
    expect(groups.map((g) => g.name)).toEqual([
      'kvroute-recording',
      'kvroute-alerts',
      'kvroute-prediction',
    ]);
    // The job the ServiceMonitor gives the targets: the Service's name (no jobLabel).
    const sm = one(ms, 'ServiceMonitor');
    expect(sm.spec.jobLabel).toBeUndefined();
    const fleet = { namespace: 'llm', job: one(ms, 'Service').metadata.name };
    expect(fleet.job).toBe('prod-kvroute');
    expect(groups[2]!.rules).toEqual([
      { record: 'kvroute:predicted_hit_ratio', expr: 'vector(0.62)', labels: fleet },
      { record: 'kvroute:hit_ratio_drift_tolerance', expr: 'vector(0.1)', labels: fleet },
    ]);
    const file = join(work, 'chart-rules.yaml');
    writeFileSync(file, YAML.stringify({ groups }));
    const r = promtool(['check', 'rules', file]);
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
    // Scraped some other way: the job is a value.
    const custom = one(
      render({ prometheusRule: { enabled: true, predictedHitRate: 0.5, job: 'routers' } }),
      'PrometheusRule',
    );
    expect(custom.spec.groups.at(-1).rules[0].labels).toEqual({ namespace: 'llm', job: 'routers' });
  });

  it('two releases in one Prometheus: each fleet is held to its own prediction (promtool test rules)', () => {
    // The second release leaves the shared rules to the first and adds only its prediction.
    const prod = one(
      render({ prometheusRule: { enabled: true, predictedHitRate: 0.62 } }),
      'PrometheusRule',
    );
    const canary = one(
      render(
        { prometheusRule: { enabled: true, includeAlerts: false, predictedHitRate: 0.55 } },
        'canary',
      ),
      'PrometheusRule',
    );
    expect(canary.spec.groups.map((g: Manifest) => g.name)).toEqual(['kvroute-prediction']);
    expect(() =>
      render({ prometheusRule: { enabled: true, includeAlerts: false, predictedHitRate: '' } }),
    ).toThrow(/prometheusRule: nothing to render/);
    const files = [join(work, 'prod-rules.yaml'), join(work, 'canary-rules.yaml')];
    writeFileSync(files[0]!, YAML.stringify({ groups: prod.spec.groups }));
    writeFileSync(files[1]!, YAML.stringify({ groups: canary.spec.groups }));
    const tokens = (job: string, cachedPerMin: number) => {
      const labels = `namespace="llm",job="${job}",instance="10.0.0.1:30000",rank="0",worker="worker-r0",model="m"`;
      return [
        { series: `kvroute_router_prompt_tokens_total{${labels}}`, values: '0+1000x120' },
        {
          series: `kvroute_router_cached_tokens_total{${labels}}`,
          values: `0+${cachedPerMin}x120`,
        },
      ];
    };
    const r = promtoolTest('two-releases', files, {
      interval: '1m',
      // prod: 30% observed against 0.62 predicted; canary: 50% against its own 0.55, within the
      // tolerance (against prod's 0.62 it would not be).
      input_series: [...tokens('prod-kvroute', 300), ...tokens('canary-kvroute', 500)],
      alert_rule_test: [
        {
          eval_time: '100m',
          alertname: 'KvrouteHitRateBelowPrediction',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', namespace: 'llm', job: 'prod-kvroute' },
              exp_annotations: {
                summary: "kvroute hit rate 30% is below the simulator's prediction",
                description:
                  'Observed hit rate has stayed more than the tolerance below kvroute:predicted_hit_ratio for 30 minutes; re-run kvroute-sim validate against this fleet to see which assumption no longer holds.',
              },
            },
          ],
        },
      ],
      promql_expr_test: [
        {
          expr: 'kvroute:hit_ratio:rate1h',
          eval_time: '100m',
          exp_samples: [
            {
              labels: 'kvroute:hit_ratio:rate1h{namespace="llm",job="canary-kvroute"}',
              value: 0.5,
            },
            { labels: 'kvroute:hit_ratio:rate1h{namespace="llm",job="prod-kvroute"}', value: 0.3 },
          ],
        },
      ],
    });
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('refuses discovery without a selector, as the router would, instead of a crash-looping pod', () => {
    expect(() => render({ discovery: { selector: { app: null } } })).toThrow(/discovery\.selector/);
    expect(() =>
      render({
        discovery: { enabled: false, selector: { app: null } },
        router: { workerUrls: ['http://w0:30000'] },
      }),
    ).not.toThrow();
  });

  it('refuses a router without workers (no discovery, no URLs, no admin token), as the router would', () => {
    const off = { discovery: { enabled: false } };
    expect(() => render(off)).toThrow(
      /no workers: with discovery\.enabled=false give router\.workerUrls/,
    );
    // The router refuses the same config: it would exit at start, crash-looping the pod.
    expect(() => resolveConfig([], {})).toThrow(/no workers/);
    // Each way the router accepts to start without discovery renders, and the router takes it.
    const ways: Record<string, unknown>[] = [
      { router: { workerUrls: ['http://w0:30000'] } },
      { adminToken: { value: 'admin-token-1' } },
      {
        router: {
          config: { models: [{ model: 'llama', 'worker-urls': ['http://w0:30000'] }] },
        },
      },
      // The same groups under the flag's name and its camelCase key.
      { router: { config: { 'model-group': ['llama=http://w0:30000'] } } },
      {
        router: {
          config: { modelGroups: [{ model: 'llama', 'worker-urls': ['http://w0:30000'] }] },
        },
      },
    ];
    for (const way of ways) {
      const ms = render({ ...off, ...way });
      validate(ms);
      expect(() => containerConfig(ms), JSON.stringify(way)).not.toThrow();
    }
    // An existing Secret: the token is not known here, but it will be there.
    expect(() => render({ ...off, adminToken: { existingSecret: 'ops-admin' } })).not.toThrow();
  });

  it('refuses router.config keys the chart owns, naming what to set instead', () => {
    // What the chart sets through the environment (which beats the config file, so the key
    // would be ignored) ...
    const ms = render({
      adminToken: { value: 'admin-token-1' },
      apiKey: { value: 'client-key-1' },
    });
    const byEnv = new Map(OPTIONS.map((o) => [envName(o), o]));
    const env = (one(ms, 'Deployment').spec.template.spec.containers[0].env as Manifest[])
      .map((e) => e.name as string)
      .filter((n) => n.startsWith('KVROUTE_'));
    const fromEnv = env.map((n) => byEnv.get(n)!.flag);
    expect(fromEnv.sort()).toEqual([
      'admin-token',
      'api-key',
      'host',
      'log-format',
      'log-level',
      'port',
    ]);
    // ... what it writes into the file itself (a second copy of the key: invalid YAML) ...
    const written = (values: Record<string, unknown>) =>
      Object.keys(
        YAML.parse(
          byKind(render(values), 'ConfigMap').find((m) => m.data?.['config.yaml'])!.data[
            'config.yaml'
          ],
        ),
      ).filter((k) => !['load-balance-method', 'load-poll-interval'].includes(k));
    const inFile = [
      ...written({}),
      ...written({ discovery: { enabled: false }, router: { workerUrls: ['http://w0:30000'] } }),
    ];
    expect(inFile.sort()).toEqual([
      'selector',
      'service-discovery',
      'service-discovery-namespace',
      'service-discovery-port',
      'worker-urls',
    ]);
    // ... and what would move /metrics off the port the probes and the ServiceMonitor use.
    const owned = [...fromEnv, ...inFile, 'admin-port', 'admin-host'];
    for (const flag of owned) {
      const o = OPTIONS.find((x) => x.flag === flag)!;
      for (const key of new Set([o.flag, o.key, ...(o.aliases ?? [])])) {
        expect(() => render({ router: { config: { [key]: 'x' } } }), key).toThrow(
          new RegExp(`^router\\.config\\.${key}: `),
        );
      }
    }
    expect(() => render({ router: { config: { port: 8000 } } })).toThrow(/use router\.port/);
    expect(() => render({ router: { config: { 'worker-urls': ['http://w:1'] } } })).toThrow(
      /router\.workerUrls and discovery/,
    );
    expect(() => render({ router: { config: { 'api-key': 'client-key-1' } } })).toThrow(
      /apiKey\.value \/ apiKey\.existingSecret/,
    );
    // Any other flag is still a key there.
    const cfg = containerConfig(
      render({ router: { config: { 'api-key-file': '/etc/keys/keys.txt', 'max-retries': 3 } } }),
    );
    expect(cfg).toMatchObject({ apiKeyFile: '/etc/keys/keys.txt', maxRetries: 3 });
  });

  it('writes non-string selector values as Helm prints them (%v), not as %!s(float64=2)', () => {
    const cfg = containerConfig(
      render({ discovery: { selector: { app: 'sglang', tier: 2, gpu: true } } }),
    );
    expect(cfg.selector).toEqual(['app=sglang', 'gpu=true', 'tier=2']);
  });

  it("API keys: from the chart's Secret or an existing one, each at least 8 characters as the router requires", () => {
    expect(() => render({ apiKey: { value: 'client-key-1 short' } })).toThrow(
      /apiKey\.value: each key must be at least 8 characters/,
    );
    // The router's own rule.
    expect(() => resolveConfig(['--mock-workers', '1'], { KVROUTE_API_KEY: 'short' })).toThrow(
      /at least 8 characters/,
    );
    const ms = render({ apiKey: { existingSecret: 'client-keys' } });
    validate(ms);
    expect(byKind(ms, 'Secret')).toEqual([]);
    const env = one(ms, 'Deployment').spec.template.spec.containers[0].env.find(
      (e: Manifest) => e.name === 'KVROUTE_API_KEY',
    );
    expect(env.valueFrom.secretKeyRef).toEqual({ name: 'client-keys', key: 'api-key' });
    expect(containerConfig(ms).apiKeys).toEqual(['from-secret-api-key']);
  });

  it("rolls the pods when the chart's Secret changes (checksum/secret)", () => {
    const sum = (values: Record<string, unknown>): string | undefined =>
      one(render(values), 'Deployment').spec.template.metadata.annotations['checksum/secret'];
    const a = sum({ adminToken: { value: 'admin-token-a' } });
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(sum({ adminToken: { value: 'admin-token-a' } })).toBe(a);
    expect(sum({ adminToken: { value: 'admin-token-b' } })).not.toBe(a);
    expect(
      sum({ adminToken: { value: 'admin-token-a' }, apiKey: { value: 'client-key-1' } }),
    ).not.toBe(a);
    // Only existing Secrets: the chart has none to hash (restarting is the operator's call).
    expect(sum({ adminToken: { existingSecret: 'ops' }, apiKey: { existingSecret: 'keys' } })).toBe(
      undefined,
    );
    // Mixed: the chart's Secret holds only what it owns.
    const mixed = render({
      adminToken: { existingSecret: 'ops' },
      apiKey: { value: 'client-key-1' },
    });
    validate(mixed);
    expect(Object.keys(one(mixed, 'Secret').data)).toEqual(['api-key']);
    expect(one(mixed, 'Deployment').spec.template.metadata.annotations['checksum/secret']).toMatch(
      /^[0-9a-f]{64}$/,
    );
  });

  it('recording: a writable volume for --record-trace and POST /trace_recording', () => {
    const trace = '/var/lib/kvroute/trace.jsonl';
    const withTrace = { router: { config: { 'record-trace': trace } } };
    // By default the root filesystem is read-only and so is the only mount: the router could
    // not open the file, and it exits when it cannot.
    const plain = one(render(), 'Deployment').spec.template.spec;
    expect(plain.containers[0].volumeMounts.every((m: Manifest) => m.readOnly)).toBe(true);
    expect(() => render(withTrace)).toThrow(/record-trace: the root filesystem is read-only/);

    const ms = render({ ...withTrace, recording: { enabled: true } });
    validate(ms);
    const pod = one(ms, 'Deployment').spec.template.spec;
    const mount = pod.containers[0].volumeMounts.find((m: Manifest) => m.name === 'recording');
    expect(mount).toEqual({ name: 'recording', mountPath: '/var/lib/kvroute' });
    expect(pod.volumes.find((v: Manifest) => v.name === 'recording')).toEqual({
      name: 'recording',
      emptyDir: {},
    });
    const cfg = containerConfig(ms);
    expect(cfg.recordTrace).toBe(trace);
    expect(writableMountOf(pod, cfg.recordTrace!)).toBe('recording');

    // A writable volume elsewhere is not enough: the deepest mount holding the path decides.
    const notUnder =
      /record-trace: the root filesystem is read-only and \/data\/t\.jsonl is not under a writable volume/;
    expect(() =>
      render({
        recording: { enabled: true },
        router: { config: { 'record-trace': '/data/t.jsonl' } },
      }),
    ).toThrow(notUnder);
    const secret = {
      extraVolumes: [{ name: 'secrets', secret: { secretName: 'kvroute-files' } }],
      extraVolumeMounts: [{ name: 'secrets', mountPath: '/etc/kvroute-secrets', readOnly: true }],
    };
    expect(() => render({ ...secret, ...withTrace })).toThrow(/is not under a writable volume/);
    expect(() =>
      render({ ...secret, router: { config: { 'record-trace': '/etc/kvroute-secrets/t.jsonl' } } }),
    ).toThrow(/is not under a writable volume/);
    // A read-only mount inside the recording volume hides it; a trailing slash is the same path.
    expect(() =>
      render({
        recording: { enabled: true, path: '/var/lib/kvroute/' },
        extraVolumes: secret.extraVolumes,
        extraVolumeMounts: [{ name: 'secrets', mountPath: '/var/lib/kvroute/ro', readOnly: true }],
        router: { config: { recordTrace: '/var/lib/kvroute/ro/t.jsonl' } },
      }),
    ).toThrow(/recordTrace: .* is not under a writable volume/);
    expect(() =>
      render({ ...withTrace, recording: { enabled: true, path: '/var/lib/kvroute/' } }),
    ).not.toThrow();

    const sized = one(render({ recording: { enabled: true, sizeLimit: '2Gi' } }), 'Deployment');
    expect(sized.spec.template.spec.volumes.at(-1)).toEqual({
      name: 'recording',
      emptyDir: { sizeLimit: '2Gi' },
    });

    // An existing claim, shared by the replicas: each pod writes under its own directory.
    const claim = render({ recording: { enabled: true, existingClaim: 'traces' } });
    validate(claim);
    const c = one(claim, 'Deployment').spec.template.spec;
    expect(c.volumes.at(-1)).toEqual({
      name: 'recording',
      persistentVolumeClaim: { claimName: 'traces' },
    });
    expect(c.containers[0].volumeMounts.at(-1)).toEqual({
      name: 'recording',
      mountPath: '/var/lib/kvroute',
      subPathExpr: '$(POD_NAME)',
    });
    expect(c.containers[0].env.find((e: Manifest) => e.name === 'POD_NAME')).toEqual({
      name: 'POD_NAME',
      valueFrom: { fieldRef: { fieldPath: 'metadata.name' } },
    });
  });

  it('extraVolumes and extraVolumeMounts: a tokenizer, an API key file and the trace secret', () => {
    const ms = render({
      extraVolumes: [
        { name: 'tokenizer', configMap: { name: 'llama-tokenizer' } },
        { name: 'secrets', secret: { secretName: 'kvroute-files' } },
        { name: 'scratch', emptyDir: {} },
      ],
      extraVolumeMounts: [
        { name: 'tokenizer', mountPath: '/models/llama', readOnly: true },
        { name: 'secrets', mountPath: '/etc/kvroute-secrets', readOnly: true },
        { name: 'scratch', mountPath: '/scratch' },
      ],
      router: {
        config: {
          tokenizer: '/models/llama/tokenizer.json',
          'api-key-file': '/etc/kvroute-secrets/api-keys',
          'record-trace-secret-file': '/etc/kvroute-secrets/trace-secret',
          'record-trace': '/scratch/trace.jsonl',
        },
      },
    });
    validate(ms);
    const pod = one(ms, 'Deployment').spec.template.spec;
    expect(pod.volumes.map((v: Manifest) => v.name)).toEqual([
      'config',
      'tokenizer',
      'secrets',
      'scratch',
    ]);
    expect(pod.containers[0].volumeMounts.map((m: Manifest) => m.mountPath)).toEqual([
      '/etc/kvroute',
      '/models/llama',
      '/etc/kvroute-secrets',
      '/scratch',
    ]);
    const cfg = containerConfig(ms);
    expect(cfg).toMatchObject({
      tokenizer: '/models/llama/tokenizer.json',
      apiKeyFile: '/etc/kvroute-secrets/api-keys',
      recordTraceSecretFile: '/etc/kvroute-secrets/trace-secret',
      recordTrace: '/scratch/trace.jsonl',
    });
    expect(writableMountOf(pod, cfg.recordTrace!)).toBe('scratch');
  });
});

describe('alert rules and dashboard', () => {
  it('promtool check rules accepts the alert file', () => {
    const r = promtool(['check', 'rules', alertsFile]);
    expect(r.out).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status).toBe(0);
  });

  it('the alerts fire on what they describe (promtool test rules)', () => {
    // The labels the router exports, plus those of a target the Prometheus Operator scrapes.
    const target = (instance: string, job = 'kvroute') =>
      `namespace="llm",job="${job}",instance="${instance}"`;
    const rank = (instance: string, r: number) =>
      `${target(instance)},rank="${r}",url="http://w${r}:30000",worker="worker-r${r}",model="llama"`;
    const healthy = (instance: string, r: number, values: string) => ({
      series: `kvroute_router_rank_healthy{${rank(instance, r)}}`,
      values,
    });
    const tokens = (job: string, prompt: string, cached: string) => {
      const labels = `${target('r1', job)},rank="0",worker="worker-r0",model="llama"`;
      return [
        { series: `kvroute_router_prompt_tokens_total{${labels}}`, values: prompt },
        { series: `kvroute_router_cached_tokens_total{${labels}}`, values: cached },
      ];
    };
    const workerDown = (instance: string, r: number) => ({
      exp_labels: {
        severity: 'warning',
        namespace: 'llm',
        job: 'kvroute',
        instance,
        rank: String(r),
        url: `http://w${r}:30000`,
        worker: `worker-r${r}`,
        model: 'llama',
      },
      exp_annotations: {
        summary: `kvroute rank ${r} (http://w${r}:30000) is down or ejected`,
        description: `The router has not routed to rank ${r} at http://w${r}:30000 for 2 minutes: failed health checks or ejected after repeated request failures.`,
      },
    });
    const noHealthy = (instance: string) => ({
      exp_labels: { severity: 'critical', namespace: 'llm', job: 'kvroute', instance },
      exp_annotations: {
        summary: `kvroute router ${instance} has no healthy worker`,
        description: `Every request through ${instance} fails with 503 until a worker recovers or is discovered.`,
      },
    });
    const fleet = { namespace: 'llm', job: 'kvroute' };
    // The prediction rules as the alert file's header says to write them by hand.
    const header = readFileSync(alertsFile, 'utf8').split('\n');
    const from = header.findIndex((l) => l.includes('by hand, in a group of your own:'));
    const example: string[] = [];
    for (const l of header.slice(from + 1)) {
      if (!l.startsWith('#   ')) break;
      example.push(l.slice(2));
    }
    const byHand = YAML.parse(example.join('\n')) as {
      record: string;
      expr: string;
      labels: Record<string, string>;
    }[];
    expect(byHand).toEqual([
      { record: 'kvroute:predicted_hit_ratio', expr: 'vector(0.62)', labels: fleet },
      { record: 'kvroute:hit_ratio_drift_tolerance', expr: 'vector(0.1)', labels: fleet },
    ]);
    writeFileSync(
      join(work, 'prediction.yaml'),
      YAML.stringify({
        groups: [
          {
            name: 'kvroute-prediction',
            rules: [
              ...byHand,
              // A second fleet in the same Prometheus, with its own prediction.
              ...byHand.map((r) => ({
                ...r,
                expr: r.record === 'kvroute:predicted_hit_ratio' ? 'vector(0.85)' : r.expr,
                labels: { namespace: 'llm', job: 'other' },
              })),
            ],
          },
        ],
      }),
    );
    const r = promtoolTest('alerts', [alertsFile, join(work, 'prediction.yaml')], {
      interval: '1m',
      input_series: [
        // r1: one of its two workers goes down. r2: both do. r3: discovery found none.
        healthy('r1', 0, '1x5 0x15'),
        healthy('r1', 1, '1x20'),
        healthy('r2', 0, '1x5 0x15'),
        healthy('r2', 1, '1x5 0x15'),
        { series: `kvroute_router_rank_ejected{${target('r1')},rank="0"}`, values: '0x20' },
        // r1 is a PD router: its decode rank 1 goes down at minute 5.
        { series: `kvroute_pd_decode_rank_healthy{${target('r1')},rank="0"}`, values: '1x20' },
        { series: `kvroute_pd_decode_rank_healthy{${target('r1')},rank="1"}`, values: '1x5 0x15' },
        { series: `kvroute_router_rank_ejected{${target('r1')},rank="1"}`, values: '0x5 1x15' },
        { series: `kvroute_router_queued_requests{${target('r1')}}`, values: '0x5 3x20' },
        { series: `kvroute_router_queued_requests{${target('r2')}}`, values: '0x25' },
        { series: `kvroute_router_queued_requests{${target('r3')}}`, values: '0x25' },
        // r1's KV events: rank 1 (healthy) loses them at minute 2; rank 0 loses them when it
        // is down anyway (no alert: it is not routed to).
        { series: `kvroute_kv_events_live{${target('r1')},rank="0"}`, values: '1x5 0x15' },
        { series: `kvroute_kv_events_live{${target('r1')},rank="1"}`, values: '1x2 0x18' },
        // Fleet kvroute: 90% hit rate for 2 hours, then 30%. Fleet other: 90% throughout.
        ...tokens('kvroute', '0+1000x200', '0+900x120 108000+300x80'),
        ...tokens('other', '0+1000x200', '0+900x200'),
      ],
      alert_rule_test: [
        {
          eval_time: '10m',
          alertname: 'KvrouteWorkerDown',
          exp_alerts: [workerDown('r1', 0), workerDown('r2', 0), workerDown('r2', 1)],
        },
        { eval_time: '6m', alertname: 'KvroutePdDecodeRankDown', exp_alerts: [] },
        {
          eval_time: '10m',
          alertname: 'KvroutePdDecodeRankDown',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet, instance: 'r1', rank: '1' },
              exp_annotations: {
                summary: 'kvroute decode rank 1 is down or ejected',
                description:
                  'The router has not sent decode work to decode rank 1 for 2 minutes: failed health checks or ejected after repeated request failures; its share of pairs goes to the other decode ranks.',
              },
            },
          ],
        },
        // Per router: r1 still has a healthy worker; r2 has none; r3 has no rank at all.
        {
          eval_time: '10m',
          alertname: 'KvrouteNoHealthyWorkers',
          exp_alerts: [noHealthy('r2'), noHealthy('r3')],
        },
        {
          eval_time: '10m',
          alertname: 'KvrouteWorkerEjected',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet, instance: 'r1', rank: '1' },
              exp_annotations: {
                summary: 'kvroute rank 1 is ejected',
                description:
                  'Outlier detection took rank 1 out of routing after repeated request failures; it comes back after its ejection time if it recovers.',
              },
            },
          ],
        },
        { eval_time: '6m', alertname: 'KvrouteKvEventsNotLive', exp_alerts: [] },
        {
          eval_time: '10m',
          alertname: 'KvrouteKvEventsNotLive',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet, instance: 'r1', rank: '1' },
              exp_annotations: {
                summary: 'kvroute router r1 routes rank 1 without its KV events',
                description:
                  "Rank 1 is healthy but its KV events have not been live for 5 minutes (endpoint not connected, batches lost, another block size, or a silent publisher: the router's log says which); it is routed from the router's learned index, less precisely.",
              },
            },
          ],
        },
        {
          eval_time: '20m',
          alertname: 'KvrouteAdmissionQueue',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet, instance: 'r1' },
              exp_annotations: {
                summary: 'kvroute router r1 has kept requests waiting for admission for 10 minutes',
                description:
                  "The router's admission limit is reached all the time (3 waiting at least): add workers or raise the limit; requests beyond the queue are rejected (kvroute_router_rejected_total).",
              },
            },
          ],
        },
        { eval_time: '100m', alertname: 'KvrouteHitRateBelowPrediction', exp_alerts: [] },
        {
          eval_time: '180m',
          alertname: 'KvrouteHitRateDrop',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet },
              exp_annotations: {
                summary: 'kvroute prefix-cache hit rate fell to 30%',
                description:
                  'The observed hit rate is below 70% of what it was an hour earlier: traffic changed, ranks restarted (cold caches), or the routing no longer keeps prefixes together.',
              },
            },
          ],
        },
        {
          eval_time: '190m',
          alertname: 'KvrouteHitRateBelowPrediction',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', ...fleet },
              exp_annotations: {
                summary: "kvroute hit rate 30% is below the simulator's prediction",
                description:
                  'Observed hit rate has stayed more than the tolerance below kvroute:predicted_hit_ratio for 30 minutes; re-run kvroute-sim validate against this fleet to see which assumption no longer holds.',
              },
            },
          ],
        },
      ],
    });
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('with several router replicas, each rank counts once and a rank’s load is the replicas’ sum', () => {
    const dash = JSON.parse(readFileSync(dashboardFile, 'utf8')) as {
      panels: { title: string; targets: { expr: string; legendFormat?: string }[] }[];
    };
    const query = (title: string, legend?: string) => {
      const p = dash.panels.find((x) => x.title === title);
      const t = p?.targets.find((x) => legend === undefined || x.legendFormat?.startsWith(legend));
      if (!t) throw new Error(`no dashboard query ${title} / ${legend}`);
      return t.expr.replaceAll('$__rate_interval', '1m').replaceAll('$job', 'kvroute');
    };
    // Two replicas (r1, r2) of fleet kvroute, each reporting the same two ranks; another fleet.
    const rank = (instance: string, r: number, job = 'kvroute') =>
      `namespace="llm",job="${job}",instance="${instance}",rank="${r}",worker="llm/sglang-${r}",model="m"`;
    const input_series = [
      ...['r1', 'r2'].flatMap((i) => [
        { series: `kvroute_router_rank_healthy{${rank(i, 0)},url="llm/sglang-0"}`, values: '1x30' },
        { series: `kvroute_router_rank_healthy{${rank(i, 1)},url="llm/sglang-1"}`, values: '1x30' },
        { series: `kvroute_router_rank_ejected{${rank(i, 0)}}`, values: '0x30' },
        { series: `kvroute_router_in_flight_requests{${rank(i, 0)}}`, values: '40x30' },
        { series: `kvroute_router_in_flight_requests{${rank(i, 1)}}`, values: '1x30' },
        { series: `kvroute_router_affinity_entries{${rank(i, 0)}}`, values: '7x30' },
      ]),
      // Only r2 ejected rank 1.
      { series: `kvroute_router_rank_ejected{${rank('r1', 1)}}`, values: '0x30' },
      { series: `kvroute_router_rank_ejected{${rank('r2', 1)}}`, values: '1x30' },
      { series: `kvroute_router_rank_healthy{${rank('o1', 0, 'other')},url="x"}`, values: '1x30' },
    ];
    writeFileSync(
      join(work, 'predictions-2.yaml'),
      YAML.stringify({
        groups: [
          {
            name: 'p',
            rules: [
              {
                record: 'kvroute:predicted_hit_ratio',
                expr: 'vector(0.6)',
                labels: { namespace: 'llm', job: 'kvroute' },
              },
              {
                record: 'kvroute:predicted_hit_ratio',
                expr: 'vector(0.9)',
                labels: { namespace: 'llm', job: 'other' },
              },
            ],
          },
        ],
      }),
    );
    const r = promtoolTest('replicas', [alertsFile, join(work, 'predictions-2.yaml')], {
      interval: '1m',
      input_series,
      promql_expr_test: [
        {
          expr: query('Healthy ranks'),
          eval_time: '5m',
          exp_samples: [{ labels: '{}', value: 2 }],
        },
        {
          expr: query('Admission queue, ejected ranks, rejections', 'ranks ejected'),
          eval_time: '5m',
          exp_samples: [{ labels: '{}', value: 1 }],
        },
        {
          expr: query('Affinity table', 'entries'),
          eval_time: '5m',
          exp_samples: [
            { labels: '{instance="r1"}', value: 7 },
            { labels: '{instance="r2"}', value: 7 },
          ],
        },
        {
          expr: query('Hit rate: observed vs predicted', 'predicted'),
          eval_time: '5m',
          exp_samples: [
            { labels: 'kvroute:predicted_hit_ratio{namespace="llm",job="kvroute"}', value: 0.6 },
          ],
        },
      ],
      alert_rule_test: [
        {
          eval_time: '25m',
          alertname: 'KvrouteQueueing',
          exp_alerts: [
            {
              exp_labels: { severity: 'warning', namespace: 'llm', job: 'kvroute', rank: '0' },
              exp_annotations: {
                summary:
                  'kvroute rank 0 holds 80 requests in flight on average, from all router replicas',
                description:
                  'Requests are queueing at rank 0: add ranks, lower load, or check whether affinity concentrates traffic on it.',
              },
            },
          ],
        },
      ],
    });
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('every dashboard query is valid PromQL (promtool) over metrics the router exports', async () => {
    const dash = JSON.parse(readFileSync(dashboardFile, 'utf8')) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr));
    expect(exprs.length).toBeGreaterThan(10);
    // Grafana's variables replaced by values Prometheus accepts, each query as a recording rule.
    const rules = exprs.map((expr, i) => ({
      record: `kvroute:dashboard_query_${i}`,
      expr: expr.replaceAll('$__rate_interval', '1m').replaceAll('$job', '.*'),
    }));
    const file = join(work, 'dashboard-rules.yaml');
    writeFileSync(file, YAML.stringify({ groups: [{ name: 'dashboard', rules }] }));
    const r = promtool(['check', 'rules', file]);
    expect(r.out).toContain(`SUCCESS: ${rules.length} rules found`);
    const used = new Set(
      [...exprs, readFileSync(alertsFile, 'utf8')].flatMap(
        (e) => e.match(/kvroute_router_\w+/g) ?? [],
      ),
    );
    const exported = await liveMetrics();
    // prom-client's default process and runtime metrics are there too.
    expect(exported).toMatch(/^# TYPE process_cpu_seconds_total counter$/m);
    expect(exported).toMatch(/^# TYPE process_resident_memory_bytes gauge$/m);
    expect(exported).toMatch(
      /^kvroute_router_request_duration_seconds_count\{route="\/v1\/chat\/completions",status="200"\} 2$/m,
    );
    expect(exported).toMatch(/^kvroute_router_upstream_ttft_seconds_bucket\{le="3600",/m);
    for (const name of used) {
      const base = name.replace(/_(bucket|sum|count)$/, '');
      expect(exported, name).toMatch(new RegExp(`^# TYPE ${base} `, 'm'));
    }
  });
});

let metricsText: Promise<string> | undefined;
/** /metrics of a router in front of two mock workers, after a few requests. */
function liveMetrics(): Promise<string> {
  metricsText ??= (async () => {
    const running = await startRouter(
      ['--mock-workers', '2', '--mock-time-scale', '0', '--port', '0', '--log-level', 'warn'],
      {},
    );
    try {
      for (const stream of [false, true]) {
        const res = await fetch(`${running.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            messages: [{ role: 'user', content: 'hello there' }],
            max_tokens: 4,
            stream,
            ...(stream ? { stream_options: { include_usage: true } } : {}),
          }),
        });
        expect(res.status).toBe(200);
        await res.text();
      }
      return await (await fetch(`${running.url}/metrics`)).text();
    } finally {
      await running.close();
    }
  })();
  return metricsText;
}

describe('live metrics', () => {
  it('promtool check metrics passes on the /metrics of a router in front of mock workers', async () => {
    const text = await liveMetrics();
    expect(text).toContain('kvroute_router_requests_total{');
    const r = promtool(['check', 'metrics'], text);
    expect(r.out).toBe('');
    expect(r.status).toBe(0);
  });
});

describe('Dockerfiles', () => {
  const images = [
    {
      file: 'router.Dockerfile',
      pkg: 'apps/router',
      bundle: 'kvroute-router.mjs',
      port: 30000,
      probe: '/liveness',
    },
    {
      file: 'mock-worker.Dockerfile',
      pkg: 'apps/mock-worker',
      bundle: 'kvroute-mock-worker.mjs',
      port: 30001,
      probe: '/health',
    },
  ];

  it.each(images)(
    '$file: multi-stage, the runtime stage holds the bundle and zeromq (KV events), non-root, with a health check',
    (img) => {
      const text = readFileSync(join(root, 'deploy/docker', img.file), 'utf8');
      const stages = text.split(/^FROM /m).slice(1);
      expect(stages.length).toBe(2);
      const [build, runtime] = stages as [string, string];
      // The build stage runs the package's own bundle script, whose output the runtime copies.
      const script = (
        JSON.parse(readFileSync(join(root, img.pkg, 'package.json'), 'utf8')) as {
          scripts: Record<string, string>;
        }
      ).scripts.bundle!;
      expect(script).toContain(`--outfile=bundle/${img.bundle}`);
      expect(build).toMatch(
        /pnpm install --frozen-lockfile && pnpm --filter @kvroute\/[\w-]+ bundle/,
      );
      const copies = runtime.match(/^COPY .*$/gm) ?? [];
      expect(copies[0]).toBe(
        `COPY --from=build /src/${img.pkg}/bundle/${img.bundle} /app/${img.bundle}`,
      );
      // zeromq beside the bundle (KV events), at the version the package pins.
      expect(copies.slice(1)).toEqual(['COPY --from=build /zmq/node_modules /app/node_modules']);
      const pinned = (
        JSON.parse(readFileSync(join(root, img.pkg, 'package.json'), 'utf8')) as {
          dependencies: Record<string, string>;
        }
      ).dependencies.zeromq;
      expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
      expect(build).toContain(`--ignore-scripts --no-audit --no-fund zeromq@${pinned}`);
      expect(runtime).toMatch(/^USER node$/m);
      expect(runtime).toMatch(/^HEALTHCHECK /m);
      expect(runtime).toContain(img.probe);
      expect(runtime).toMatch(new RegExp(`^EXPOSE ${img.port}$`, 'm'));
      expect(runtime).toContain(`ENTRYPOINT ["node", "/app/${img.bundle}"`);
      // The environment beats a mounted config file: the image sets only defaults below it.
      expect(runtime).not.toMatch(/^ENV .*KVROUTE_(HOST|PORT)=/m);
    },
  );

  it.each(images)(
    '$file: the bundle it copies builds, runs alone from an empty folder, and passes the HEALTHCHECK command',
    async (img) => {
      execFileSync('pnpm', ['--silent', 'bundle'], { cwd: join(root, img.pkg), stdio: 'pipe' });
      const built = join(root, img.pkg, 'bundle', img.bundle);
      expect(existsSync(built)).toBe(true);
      const dir = mkdtempSync(join(work, 'image-'));
      writeFileSync(join(dir, img.bundle), readFileSync(built));
      const text = readFileSync(join(root, 'deploy/docker', img.file), 'utf8');
      const entry = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(text)![1]!) as string[];
      const health = JSON.parse(/^\s+CMD (\[.*\])$/m.exec(text)![1]!) as string[];
      // The image's command, with the folder for /app, loopback and a free port.
      const args = entry
        .slice(1)
        .map((a) => a.replace('/app/', `${dir}/`))
        .map((a) => (a === '0.0.0.0' ? '127.0.0.1' : a));
      const portAt = args.indexOf('--port');
      if (portAt >= 0) args[portAt + 1] = '0';
      const extra =
        img.bundle === 'kvroute-router.mjs'
          ? ['--mock-workers', '1', '--mock-time-scale', '0', '--port', '0']
          : [];
      const child = spawn(process.execPath, [...args, ...extra], {
        cwd: dir,
        env: { PATH: process.env.PATH, NODE_ENV: 'production', KVROUTE_HOST: '127.0.0.1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      try {
        const port = await new Promise<number>((resolve, reject) => {
          let out = '';
          const onData = (d: Buffer) => {
            out += d;
            const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
            if (m) resolve(Number(m[1]));
          };
          child.stdout.on('data', onData);
          child.stderr.on('data', onData);
          child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
        });
        // The HEALTHCHECK's node -e script, pointed at this port.
        let script = health[2]!.replace(/process\.env\.KVROUTE_PORT|30001/, String(port));
        const check = (s: string) =>
          spawnSync(health[0]!, [health[1]!, s], { encoding: 'utf8', timeout: 20_000 });
        if (script.includes("'/proc/net/'")) {
          // The router's check probes every listening socket of the container (whatever port
          // --port, KVROUTE_PORT or the config file chose): give it a socket table holding
          // this router alone, then one holding only a port where nothing answers.
          const table = (p: number) =>
            `  sl  local_address rem_address   st\n   0: 00000000:${p.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 1\n`;
          const only = (p: number) => {
            const net = mkdtempSync(join(work, 'proc-net-'));
            writeFileSync(join(net, 'tcp'), table(p));
            return script.replace("'/proc/net/'", JSON.stringify(`${net}/`));
          };
          expect(check(only(9)).status).toBe(1);
          script = only(port);
        }
        const probe = check(script);
        expect(probe.status, probe.stderr).toBe(0);
      } finally {
        child.kill('SIGTERM');
      }
    },
    180_000,
  );
});
