#!/usr/bin/env node
// The package is consumed as TypeScript source: register tsx's loader, then run the server.
import { register } from 'tsx/esm/api';

register();
await import('../src/server.ts');
