// Wires Kubernetes worker discovery into the router's lifecycle: it starts when the app is
// ready (after the static --worker-urls are added) and stops when the app closes.
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
  const { config } = opts.state;
  const discovery = createKubernetesDiscovery(
    {
      addWorker: (url) => opts.state.addWorker(url),
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
