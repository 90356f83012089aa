// Wires Kubernetes worker discovery into the router's lifecycle: it starts when the app is
// ready (after the static --worker-urls are added and checked) and stops when the app
// closes. Each discovered worker is health-checked as it is added, and the first list's
// adds (with their checks) finish before the router serves.
import type { KubeConfig } from '@kubernetes/client-node';
import type { FastifyInstance } from 'fastify';
import type { RouterState } from '../state.ts';
import { createKubernetesDiscovery } from './kubernetes.ts';

export interface DiscoveryPluginOptions {
  state: RouterState;
  kubeConfig?: KubeConfig;
}

export async function discoveryPlugin(
  app: FastifyInstance,
  opts: DiscoveryPluginOptions,
): Promise<void> {
  const { config, table, health } = opts.state;
  // Ranks numbered by worker URL, not by the pod churn this replica happened to see, so every
  // replica gives a pod the same rank (rank-table.ts). Set before any worker is added.
  table.ordered = true;
  const discovery = createKubernetesDiscovery(
    {
      addWorker: async (url, pod) => {
        const worker = await opts.state.addWorker(url);
        worker.pod = pod;
        // Checked as it joins, whatever the check settings, as static workers are checked
        // before serving: /readiness turns ok as soon as one passes, not a health interval
        // later (or, with active checks off, never).
        await health.check(worker);
        return worker;
      },
      removeWorker: (url) => opts.state.removeWorker(url),
    },
    {
      selector: config.selector,
      port: config.serviceDiscoveryPort,
      ...(config.serviceDiscoveryNamespace !== undefined
        ? { namespace: config.serviceDiscoveryNamespace }
        : {}),
      ...(opts.kubeConfig ? { kubeConfig: opts.kubeConfig } : {}),
      log: app.log,
    },
  );
  app.addHook('onReady', () => discovery.start());
  app.addHook('onClose', () => discovery.stop());
}
