// A radix cache's nodes, for tests that check its structure (the root is private).
import type { RadixCache, RadixNode } from '../../src/cache/radix-cache.ts';

export function rootOf(cache: RadixCache): RadixNode {
  return (cache as unknown as { root: RadixNode }).root;
}

/** Every node below the root, parents before their children. */
export function cachedNodes(cache: RadixCache): RadixNode[] {
  const out: RadixNode[] = [];
  const stack = [...rootOf(cache).children];
  while (stack.length > 0) {
    const n = stack.pop()!;
    out.push(n);
    for (const c of n.children) stack.push(c);
  }
  return out;
}
