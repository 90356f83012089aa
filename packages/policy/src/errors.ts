// Coded errors, in one place, so hosts can map them to HTTP statuses and CLI messages
// by `code` instead of matching message text.

/** A config that names an unknown method, affinity kind or option. */
export class PolicyConfigError extends Error {
  readonly code = 'POLICY_CONFIG';
  override name = 'PolicyConfigError';
}

/**
 * A config number out of range or not a number (window <= 0, prefixLength < window, ...).
 * A RangeError as the issue asks, carrying the same code as PolicyConfigError and the field.
 */
export class PolicyRangeError extends RangeError {
  readonly code = 'POLICY_CONFIG';
  override name = 'PolicyRangeError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/** Every rank is unhealthy, or there are no ranks at all. */
export class NoHealthyRankError extends Error {
  readonly code = 'NO_HEALTHY_RANK';
  override name = 'NoHealthyRankError';
  constructor(readonly numRanks: number) {
    super(
      numRanks === 0
        ? 'no healthy rank: the rank list is empty'
        : `no healthy rank: all ${numRanks} ranks are unhealthy`,
    );
  }
}

/** An explicit routed rank (SGLang's routed_dp_rank) that is not a usable rank. */
export class RoutedRankError extends Error {
  readonly code = 'ROUTED_RANK_INVALID';
  override name = 'RoutedRankError';
  constructor(
    readonly routedRank: unknown,
    readonly numRanks: number,
    message: string,
  ) {
    super(message);
  }
}

/** A token id that is not an integer in [0, 2^32): it cannot be hashed as a little-endian uint32. */
export class TokenIdRangeError extends RangeError {
  readonly code = 'TOKEN_ID_INVALID';
  override name = 'TokenIdRangeError';
  constructor(
    readonly index: number,
    readonly value: unknown,
  ) {
    super(
      `inputIds[${index}] must be an integer in [0, 2^32), got ${typeof value === 'string' ? `'${value}'` : String(value)}`,
    );
  }
}
