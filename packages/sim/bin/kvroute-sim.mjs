#!/usr/bin/env node
// Launcher for the `kvroute-sim` bin: the package ships TypeScript source, so run
// src/cli.ts through tsx's loader in this same process (exit code and stdio pass through).
import { register } from 'tsx/esm/api';

register();
await import(new URL('../src/cli.ts', import.meta.url).href);
