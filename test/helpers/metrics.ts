// A Prometheus counter summed over all its label sets, from a router's /metrics text.
export function metricSum(text: string, name: string): number {
  return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))].reduce(
    (n, m) => n + Number(m[1]),
    0,
  );
}

/** A PD router's prefill-side prompt and cached tokens over all ranks (hit rate = cached / prompted). */
export async function pdPrefillTokens(url: string): Promise<{ prompted: number; cached: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return {
    prompted: metricSum(text, 'kvroute_pd_prefill_prompt_tokens_total'),
    cached: metricSum(text, 'kvroute_pd_prefill_cached_tokens_total'),
  };
}
