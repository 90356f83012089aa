// autocannon ships no types; the benchmark uses this much of it.
declare module 'autocannon' {
  export interface AutocannonResult {
    requests: { average: number; total: number };
    latency: { p50: number; p90: number; p99: number; average: number; max: number };
    non2xx: number;
    errors: number;
    timeouts: number;
  }
  export default function autocannon(opts: Record<string, unknown>): Promise<AutocannonResult>;
}
