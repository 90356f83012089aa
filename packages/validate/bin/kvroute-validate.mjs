#!/usr/bin/env node
// Launcher for the `kvroute-validate` bin (also run by `kvroute-sim validate`): the package
// ships TypeScript source, so run src/cli.ts through tsx's loader in this same process.
import { register } from 'tsx/esm/api';

register();
await import(new URL('../src/cli.ts', import.meta.url).href);
