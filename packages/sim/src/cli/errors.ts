// Errors the CLI reports as "bad input" (exit code 2) rather than as a crash (exit 1).

export class UsageError extends Error {
  override name = 'UsageError';
  readonly exitCode = 2;
  constructor(
    message: string,
    /** Subcommand whose usage line to point at, if any. */
    readonly command?: string,
  ) {
    super(message);
  }
}

/**
 * Errors thrown by the sim and policy packages that are the user's input being wrong
 * (unknown names, out-of-range options, malformed trace or profile files), recognised by
 * their code or name so the CLI exits 2 with the message instead of a stack trace.
 */
export function isInputError(err: unknown): err is Error {
  if (!(err instanceof Error)) return false;
  if (err instanceof UsageError) return true;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && INPUT_CODES.has(code)) return true;
  if (INPUT_NAMES.has(err.name)) return true;
  // Missing or unreadable input files.
  return typeof code === 'string' && (code === 'ENOENT' || code === 'EISDIR' || code === 'EACCES');
}

const INPUT_CODES = new Set([
  'POLICY_CONFIG',
  'ERR_PARSE_ARGS_UNKNOWN_OPTION',
  'ERR_PARSE_ARGS_INVALID_OPTION_VALUE',
  'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL',
  'TRACE_FORMAT',
  'WORKLOAD_OPTION',
  // A request larger than a rank's whole KV pool: the profile is too small for the workload.
  'KV_CAPACITY',
]);
const INPUT_NAMES = new Set(['PolicyConfigError', 'PolicyRangeError', 'TraceFormatError']);
