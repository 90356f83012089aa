// The contract between the CLI's dispatcher and each subcommand. A subcommand module
// exports `command: Subcommand`; registry.ts lists the modules.

export interface CliOut {
  write(chunk: string): unknown;
}

export interface CliErr extends CliOut {
  /** True when stderr is a terminal: only then is a progress bar drawn. */
  isTTY?: boolean;
  columns?: number;
}

export interface CliIo {
  stdout: CliOut;
  stderr: CliErr;
  /** Relative file arguments resolve against this. */
  cwd: string;
  /** Wall clock for the progress bar only (never for simulated time); injectable for tests. */
  now?: () => number;
}

export interface Subcommand {
  readonly name: string;
  /** One line for `kvroute-sim --help`. */
  readonly summary: string;
  /** Full `--help` text: synopsis, flags, examples. */
  readonly usage: string;
  /** Returns the exit code. Throw UsageError (or a coded input error) for bad input: exit 2. */
  run(argv: readonly string[], io: CliIo): Promise<number>;
  /** True when `run` answers `--help` itself (a command carried out by another program). */
  readonly ownsHelp?: boolean;
}
