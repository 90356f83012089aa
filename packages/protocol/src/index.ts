export {
  badGateway,
  badRequest,
  contextLengthExceeded,
  type ErrorOptions,
  errorTypeForStatus,
  forbidden,
  gatewayTimeout,
  internalError,
  isProtocolError,
  modelNotFound,
  notFound,
  type OpenAIErrorBody,
  openAIErrorBody,
  ProtocolError,
  payloadTooLarge,
  routeNotFound,
  serviceUnavailable,
} from './errors.ts';
export { wrongType } from './fields.ts';
export {
  type HeaderSource,
  RANK_HEADER,
  ROUTING_KEY_HEADERS,
  type RoutingHints,
  routedRankFromHeaders,
  routedRankParam,
  routingHints,
  routingKeyFromHeaders,
} from './headers.ts';
export {
  createHttpAgent,
  type Dispatcher,
  describeError,
  errorCode,
  type GetResult,
  getJson,
  getText,
  type HttpAgentOptions,
  isConnectError,
  type PostOptions,
  post,
} from './http-client.ts';
export {
  checkJsonDepth,
  checkOutputTokens,
  DEFAULT_LIMITS,
  type RequestLimits,
} from './limits.ts';
export {
  type ChatContentPart,
  type ChatMessage,
  DEFAULT_MAX_TOKENS,
  isPlainObject,
  kindForPath,
  type ParsedRequest,
  type PromptSource,
  parseChatCompletionRequest,
  parseCompletionRequest,
  parseGenerateRequest,
  parseJsonBody,
  parseRequest,
  REQUEST_PATHS,
  type RequestKind,
} from './parse.ts';
export {
  parseEmbeddingRequest,
  parseRerankRequest,
  parseResponsesRequest,
  rerankDocumentText,
} from './parse-inputs.ts';
export {
  buildRouteRequest,
  type ProtocolRouteRequest,
  routeRequestFromScan,
} from './route-request.ts';
export {
  approximateText,
  approximateTokenIds,
  canonicalChatText,
  messageText,
} from './routing-text.ts';
export {
  type ScannedRequest,
  type ScanOptions,
  scanRequest,
  topLevelSpans,
  topLevelSpansOf,
  withRoutedRank,
} from './scan.ts';
export {
  SSE_DONE,
  SSE_DONE_DATA,
  SseReader,
  type SseReaderOptions,
  type SseSink,
  SseWriter,
  sseEvent,
} from './sse.ts';
export { SseDataFacts, SseTemplate } from './sse-data.ts';
export {
  approximateTokenizer,
  createRoutingTokenizer,
  type RoutingTokenizer,
  type RoutingTokenizerOptions,
} from './tokenizer.ts';
export {
  carriesTokens,
  type ReportedUsage,
  type ResponseFacts,
  reportedUsage,
  responseFacts,
  UsageScanner,
  usageFromObject,
} from './usage.ts';
