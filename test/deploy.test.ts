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
import { resolveConfig, startRouter } from '@kvroute/router';
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

function render(values: Record<string, unknown> = {}): Manifest[] {
  const out: Manifest[] = [];
  for (const [file, text] of renderChart(chartDir, {
    releaseName: 'prod',
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

/** The router config the chart's ConfigMap and Deployment env give the container. */
function containerConfig(ms: Manifest[]) {
  const cm = byKind(ms, 'ConfigMap').find((m) => m.data?.['config.yaml'] !== undefined);
  const container = one(ms, 'Deployment').spec.template.spec.containers[0];
  const env: Record<string, string> = {};
  for (const e of container.env)
    env[e.name] = e.value ?? `from-secret-${e.valueFrom.secretKeyRef.key}`;
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
    const cfg = containerConfig(ms);
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

  it('the PrometheusRule carries the alert file plus the prediction, and promtool accepts it', () => {
    const rule = one(
      render({ prometheusRule: { enabled: true, predictedHitRate: 0.62 } }),
      'PrometheusRule',
    );
    const groups = rule.spec.groups as {
      name: string;
      rules: { record?: string; expr: string }[];
    }[];
    expect(groups.map((g) => g.name)).toEqual([
      'kvroute-recording',
      'kvroute-alerts',
      'kvroute-prediction',
    ]);
    expect(groups[2]!.rules).toEqual([
      { record: 'kvroute:predicted_hit_ratio', expr: 'vector(0.62)' },
      { record: 'kvroute:hit_ratio_drift_tolerance', expr: 'vector(0.1)' },
    ]);
    const file = join(work, 'chart-rules.yaml');
    writeFileSync(file, YAML.stringify({ groups }));
    const r = promtool(['check', 'rules', file]);
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  });

  it('refuses discovery without a selector, as the router would, instead of a crash-looping pod', () => {
    expect(() => render({ discovery: { selector: { app: null } } })).toThrow(/discovery\.selector/);
    expect(() => render({ discovery: { enabled: false, selector: { app: null } } })).not.toThrow();
  });
});

describe('alert rules and dashboard', () => {
  it('promtool check rules accepts the alert file', () => {
    const r = promtool(['check', 'rules', alertsFile]);
    expect(r.out).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status).toBe(0);
  });

  it('the alerts fire on what they describe (promtool test rules)', () => {
    const tests = join(work, 'alerts.test.yaml');
    writeFileSync(
      tests,
      YAML.stringify({
        rule_files: [alertsFile, join(work, 'prediction.yaml')],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [
              {
                series: 'kvroute_router_rank_healthy{instance="r1",rank="0",url="http://w0:30000"}',
                values: '1x5 0x10',
              },
              {
                series: 'kvroute_router_rank_healthy{instance="r1",rank="1",url="http://w1:30000"}',
                values: '1x15',
              },
              { series: 'kvroute_router_rank_ejected{instance="r1",rank="0"}', values: '0x20' },
              { series: 'kvroute_router_rank_ejected{instance="r1",rank="1"}', values: '0x5 1x15' },
              { series: 'kvroute_router_queued_requests{instance="r1"}', values: '0x5 3x20' },
              // 90% hit rate for 2 hours, then 30%.
              {
                series: 'kvroute_router_prompt_tokens_total{instance="r1",rank="0"}',
                values: '0+1000x200',
              },
              {
                series: 'kvroute_router_cached_tokens_total{instance="r1",rank="0"}',
                values: '0+900x120 108000+300x80',
              },
            ],
            alert_rule_test: [
              {
                eval_time: '10m',
                alertname: 'KvrouteWorkerDown',
                exp_alerts: [
                  {
                    exp_labels: {
                      severity: 'warning',
                      instance: 'r1',
                      rank: '0',
                      url: 'http://w0:30000',
                    },
                    exp_annotations: {
                      summary: 'kvroute rank 0 (http://w0:30000) is down or ejected',
                      description:
                        'The router has not routed to rank 0 at http://w0:30000 for 2 minutes: failed health checks or ejected after repeated request failures.',
                    },
                  },
                ],
              },
              { eval_time: '10m', alertname: 'KvrouteNoHealthyWorkers', exp_alerts: [] },
              {
                eval_time: '10m',
                alertname: 'KvrouteWorkerEjected',
                exp_alerts: [
                  {
                    exp_labels: { severity: 'warning', instance: 'r1', rank: '1' },
                    exp_annotations: {
                      summary: 'kvroute rank 1 is ejected',
                      description:
                        'Outlier detection took rank 1 out of routing after repeated request failures; it comes back after its ejection time if it recovers.',
                    },
                  },
                ],
              },
              {
                eval_time: '20m',
                alertname: 'KvrouteAdmissionQueue',
                exp_alerts: [
                  {
                    exp_labels: { severity: 'warning', instance: 'r1' },
                    exp_annotations: {
                      summary:
                        'kvroute router r1 has kept requests waiting for admission for 10 minutes',
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
                    exp_labels: { severity: 'warning' },
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
                    exp_labels: { severity: 'warning' },
                    exp_annotations: {
                      summary: "kvroute hit rate 30% is below the simulator's prediction",
                      description:
                        'Observed hit rate has stayed more than the tolerance below kvroute:predicted_hit_ratio for 30 minutes; re-run kvroute-sim validate against this fleet to see which assumption no longer holds.',
                    },
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
    writeFileSync(
      join(work, 'prediction.yaml'),
      YAML.stringify({
        groups: [
          {
            name: 'kvroute-prediction',
            rules: [
              { record: 'kvroute:predicted_hit_ratio', expr: 'vector(0.85)' },
              { record: 'kvroute:hit_ratio_drift_tolerance', expr: 'vector(0.1)' },
            ],
          },
        ],
      }),
    );
    const r = promtool(['test', 'rules', tests]);
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
    '$file: multi-stage, the runtime stage holds only the bundle, non-root, with a health check',
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
      expect(copies).toEqual([
        `COPY --from=build /src/${img.pkg}/bundle/${img.bundle} /app/${img.bundle}`,
      ]);
      expect(runtime).toMatch(/^USER node$/m);
      expect(runtime).toMatch(/^HEALTHCHECK /m);
      expect(runtime).toContain(img.probe);
      expect(runtime).toMatch(new RegExp(`^EXPOSE ${img.port}$`, 'm'));
      expect(runtime).toContain(`ENTRYPOINT ["node", "/app/${img.bundle}"`);
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
        const script = health[2]!.replace(/process\.env\.KVROUTE_PORT|30001/, String(port));
        const probe = spawnSync(health[0]!, [health[1]!, script], {
          encoding: 'utf8',
          timeout: 20_000,
        });
        expect(probe.status, probe.stderr).toBe(0);
      } finally {
        child.kill('SIGTERM');
      }
    },
    180_000,
  );
});
