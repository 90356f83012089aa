import { main, USAGE } from '../../compare/main.ts';
import type { Subcommand } from '../command.ts';

export const command: Subcommand = {
  name: 'compare',
  summary:
    'regenerate docs/policy-comparison.{md,html}: every method on the comparison scenarios, targets judged',
  usage: USAGE,
  run: (argv, io) => main([...argv], io),
};
