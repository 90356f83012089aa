// The mock worker prices a prefill-to-decode KV transfer with the simulator's own function
// (@kvroute/sim/model: setup + whole prompt's KV bytes over the link's bandwidth), so the mock
// PD workers and the simulator's PD layout charge a transfer identically. This is the one
// place the mock imports it from.
export {
  DEFAULT_KV_LINK_GBPS,
  DEFAULT_KV_SETUP_MS,
  finishedPath,
  kvLoadTokensPerMs,
  kvTransferMs,
  profileKvBytesPerToken,
  writeBack,
} from '@kvroute/sim/model';
