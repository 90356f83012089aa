import { parseCommandArgs } from '../args.ts';
import type { Subcommand } from '../command.ts';
import { getProfile, profileNames } from '../sim-api.ts';

export const command: Subcommand = {
  name: 'profiles',
  summary: 'list the cost profiles, one per line',
  usage: `usage: kvroute-sim profiles

Prints each built-in cost profile as "name  description", one per line. A calibrated
profile file (kvroute-cost-profile/v1 JSON) can be used instead with --profile-file.
`,
  async run(argv, io) {
    parseCommandArgs('profiles', argv, {});
    const names = profileNames();
    const width = Math.max(0, ...names.map((n) => n.length));
    for (const name of names) {
      // Descriptions may run to several sentences; the listing keeps one line each.
      const description = getProfile(name).description.replace(/\s+/g, ' ').trim();
      io.stdout.write(`${name.padEnd(width)}  ${description}\n`);
    }
    return 0;
  },
};
