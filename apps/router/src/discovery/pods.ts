// What a worker pod means to the router, as SGLang's router reads it for --service-discovery:
// a pod is a worker at http://<podIP>:<port> once it runs, reports the Ready condition and is
// not being deleted. Pure functions over the pod objects the Kubernetes API returns.

/** The fields of a v1 Pod the router reads (the API returns many more). */
export interface PodLike {
  metadata?: { name?: string; namespace?: string; deletionTimestamp?: Date | string };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: { type?: string; status?: string }[];
  };
}

export function podKey(pod: PodLike): string {
  return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
}

/** The worker URL of a pod that can take requests now, else undefined. */
export function readyWorkerUrl(pod: PodLike, port: number): string | undefined {
  const s = pod.status;
  if (s?.phase !== 'Running' || !s.podIP) return undefined;
  if (pod.metadata?.deletionTimestamp) return undefined;
  const ready = s.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  if (!ready) return undefined;
  const host = s.podIP.includes(':') ? `[${s.podIP}]` : s.podIP;
  return `http://${host}:${port}`;
}

/** --selector key=value requirements as the API's labelSelector parameter. */
export function labelSelector(requirements: readonly string[]): string {
  return requirements.join(',');
}
