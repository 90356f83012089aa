// Scenario registry: names -> definitions. Other modules add scenarios with registerScenario
// (hot-prefix, rank-failure, scale-out live in their own files).
import { agentic } from './agentic.ts';
import { fitProbe } from './fit-probe.ts';
import { hotPrefix } from './hot-prefix.ts';
import { WorkloadOptionError } from './options.ts';
import { rankFailure } from './rank-failure.ts';
import { replay } from './replay.ts';
import { scaleOut } from './scale-out.ts';
import { seedConcurrent, seedSequential } from './seed.ts';
import { sharedPrefix } from './shared-prefix.ts';
import type { ScenarioDefinition, WorkloadPlan } from './types.ts';

const registry = new Map<string, ScenarioDefinition>();

export function registerScenario(def: ScenarioDefinition): void {
  if (registry.has(def.name)) throw new Error(`scenario '${def.name}' is already registered`);
  registry.set(def.name, def);
}

// hot-prefix, rank-failure and scale-out: the load-aware affinity scenarios.
for (const def of [
  seedSequential,
  seedConcurrent,
  agentic,
  sharedPrefix,
  replay,
  hotPrefix,
  rankFailure,
  scaleOut,
  fitProbe,
]) {
  registerScenario(def);
}

export function scenarioNames(): string[] {
  return [...registry.keys()];
}

export function getScenario(name: string): ScenarioDefinition {
  const def = registry.get(name);
  if (!def) {
    throw new WorkloadOptionError(
      `unknown scenario '${name}'; valid scenarios: ${scenarioNames().join(', ')}`,
    );
  }
  return def;
}

export function scenarioList(): {
  name: string;
  description: string;
  defaults: Record<string, unknown>;
}[] {
  return [...registry.values()].map((d) => ({
    name: d.name,
    description: d.description,
    defaults: { ...d.defaults },
  }));
}

/** Builds a plan; unknown option names are an error listing the scenario's options. */
export function buildWorkload(
  scenario: string,
  options: Record<string, unknown>,
  seed: string | number,
): WorkloadPlan {
  const def = getScenario(scenario);
  for (const key of Object.keys(options)) {
    if (!Object.hasOwn(def.defaults, key)) {
      throw new WorkloadOptionError(
        `${scenario}: unknown option '${key}'; valid options: ${Object.keys(def.defaults).join(', ')}`,
      );
    }
  }
  const merged: Record<string, unknown> = { ...def.defaults };
  for (const [k, v] of Object.entries(options)) if (v !== undefined) merged[k] = v;
  const plan = def.build(merged, seed);
  plan.options = merged;
  return plan;
}
