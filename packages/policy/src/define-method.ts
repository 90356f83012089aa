import type { Method, MethodFactory } from './types.ts';

/**
 * Declares a method factory with the option names it reads, so the dispatcher can reject
 * unknown options with the list of valid ones.
 */
export function defineMethod(
  optionNames: readonly string[],
  create: (options: Record<string, unknown>) => Method,
): MethodFactory {
  return Object.assign(create, { optionNames });
}
