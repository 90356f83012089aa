// One run of the scale bench, in its own process so its peak RSS is its own: builds the
// replay of a trace file and simulates it, then prints one JSON line. Plain JavaScript, so
// plain node runs it on the compiled package (dist/), as the kvroute-sim bin does; with
// --source it imports src/ instead (the bench runs it under tsx then).
//   node bench/scale-child.mjs FILE RANKS POLICY [--source]
const [file, ranksText, policy] = process.argv.slice(2);
const from = process.argv.includes('--source')
  ? (p) => new URL(`../src/${p}.ts`, import.meta.url).href
  : (p) => new URL(`../dist/${p}.js`, import.meta.url).href;
const { getProfile } = await import(from('cost/profiles'));
const { simulatePlan } = await import(from('simulate'));
const { buildWorkload } = await import(from('workloads/registry'));

const ranks = Number(ranksText);
const t0 = performance.now();
const c0 = process.cpuUsage();
const plan = buildWorkload('replay', { file, ranks }, 1);
const run = simulatePlan(plan, {
  policy: { method: policy },
  ranks,
  profile: getProfile('h200-llama-3.1-8b'),
  seed: 1,
});
const cpu = process.cpuUsage(c0);
console.log(
  JSON.stringify({
    requests: run.summary.requests,
    wallS: (performance.now() - t0) / 1000,
    cpuS: (cpu.user + cpu.system) / 1e6,
    peakRssMiB: process.resourceUsage().maxRSS / 1024,
    events: run.summary.events,
  }),
);
