// Worker discovery through the Kubernetes API, as SGLang's router does with
// --service-discovery --selector: list the pods matching the label selector, then watch them
// (@kubernetes/client-node's informer: list + watch from the list's resourceVersion, relisting
// when the watch expires). Each pod that becomes Ready is added as a worker at
// http://<podIP>:<port>; one that stops being Ready or is deleted is removed. Credentials come
// from the pod's service account in a cluster, else from KUBECONFIG / ~/.kube/config.
// The client library is loaded only when discovery is on.
import { existsSync, readFileSync } from 'node:fs';
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import type { FastifyBaseLogger } from 'fastify';
import { labelSelector, type PodLike, podKey, readyWorkerUrl } from './pods.ts';

export interface DiscoveryTarget {
  /** `pod` is the pod's `namespace/name`. */
  addWorker(url: string, pod: string): Promise<unknown>;
  removeWorker(url: string): unknown;
}

export interface KubernetesDiscoveryOptions {
  selector: readonly string[];
  port: number;
  /** Default: the service account's namespace in a cluster, else the kubeconfig context's, else "default". */
  namespace?: string;
  /** Default: loaded from the cluster or KUBECONFIG (tests pass one pointing at a fake API server). */
  kubeConfig?: KubeConfig;
  log: FastifyBaseLogger;
  /** First delay before re-listing after an API error; doubles up to 30 s. */
  retryDelayMs?: number;
}

const SA_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

export interface KubernetesDiscovery {
  /** Resolves once the first list has been applied (or has failed and a retry is scheduled). */
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Pod (namespace/name) -> the worker URL added for it. */
  readonly workers: ReadonlyMap<string, string>;
}

export function createKubernetesDiscovery(
  target: DiscoveryTarget,
  opts: KubernetesDiscoveryOptions,
): KubernetesDiscovery {
  const workers = new Map<string, string>();
  // One chain per pod so an add still in flight is not overtaken by its own removal.
  const chains = new Map<string, Promise<void>>();
  let informer: { start(): Promise<void>; stop(): Promise<void> } | undefined;
  let retry: NodeJS.Timeout | undefined;
  let stopped = false;
  let delay = opts.retryDelayMs ?? 1000;
  const log = opts.log;

  const enqueue = (key: string, step: () => Promise<void>): void => {
    const next = (chains.get(key) ?? Promise.resolve()).then(step).catch((err: unknown) => {
      log.warn({ pod: key, err }, 'service discovery: could not apply a pod change');
    });
    chains.set(key, next);
    void next.finally(() => {
      if (chains.get(key) === next) chains.delete(key);
    });
  };

  const remove = async (key: string): Promise<void> => {
    const url = workers.get(key);
    if (url === undefined) return;
    workers.delete(key);
    target.removeWorker(url);
    log.info({ pod: key, url }, 'service discovery: worker removed');
  };

  const reconcile = (pod: PodLike): void => {
    const key = podKey(pod);
    const url = readyWorkerUrl(pod, opts.port);
    enqueue(key, async () => {
      const current = workers.get(key);
      if (current === url) return;
      if (current !== undefined) await remove(key);
      if (url === undefined || stopped) return;
      await target.addWorker(url, key);
      workers.set(key, url);
      log.info({ pod: key, url }, 'service discovery: worker added');
    });
  };

  return {
    workers,
    async start() {
      const k8s = await import('@kubernetes/client-node');
      let kc = opts.kubeConfig;
      if (!kc) {
        kc = new k8s.KubeConfig();
        kc.loadFromDefault();
      }
      const namespace =
        opts.namespace ??
        (existsSync(SA_NAMESPACE) ? readFileSync(SA_NAMESPACE, 'utf8').trim() : undefined) ??
        kc.getContextObject(kc.getCurrentContext())?.namespace ??
        'default';
      const selector = labelSelector(opts.selector);
      const core = kc.makeApiClient(k8s.CoreV1Api);
      const inf = k8s.makeInformer<V1Pod>(
        kc,
        `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`,
        () => core.listNamespacedPod({ namespace, labelSelector: selector }) as never,
        selector,
      );
      informer = inf;
      inf.on('add', (pod) => reconcile(pod));
      inf.on('update', (pod) => reconcile(pod));
      inf.on('delete', (pod) => {
        const key = podKey(pod);
        enqueue(key, () => remove(key));
      });
      inf.on('connect', () => {
        delay = opts.retryDelayMs ?? 1000;
      });
      inf.on('error', (err) => {
        if (stopped) return;
        log.warn(
          { err, namespace, selector, retryInMs: delay },
          'service discovery: Kubernetes API error; listing again later',
        );
        retry = setTimeout(() => {
          void inf.start().catch(() => {});
        }, delay);
        delay = Math.min(delay * 2, 30_000);
      });
      log.info({ namespace, selector, port: opts.port }, 'service discovery: watching pods');
      // start() lists, then opens the watch; errors reach the 'error' handler, which retries.
      await inf.start().catch(() => {});
      // Let the adds of the first list finish, so a router is ready with them at start.
      await Promise.all([...chains.values()]);
    },
    async stop() {
      stopped = true;
      clearTimeout(retry);
      await informer?.stop();
      await Promise.all([...chains.values()]);
    },
  };
}
