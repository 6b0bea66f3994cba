import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypesHTTP1

/// The console's HTTP/1 server: Hummingbird's, with two things its default lacks (`ingest http`
/// has ``RequestServer``, with the same two rules and less CPU per request).
///
/// - An idle timeout: a connection that sends nothing for that long, between requests or in the
///   middle of one (a body announced and withheld), is closed; one whose request is being
///   answered is not.
/// - The persistence rules of RFC 9112 §9.3 (``ConnectionPersistence``): Hummingbird sees requests
///   without their version and closes a connection only for an exact `Connection: close`, so an
///   HTTP/1.0 client that waits for the close (`ab`) waited for the idle timeout after each answer,
///   and `Connection: CLOSE` or `keep-alive, close` kept the connection open.
public enum HTTP1Server {
    public static func builder(
        idleTimeout: Duration, additionalChannelHandlers: @escaping @Sendable () -> [any RemovableChannelHandler] = { [] }
    ) -> HTTPServerBuilder {
        HTTPServerBuilder { responder in
            HTTP10Aware(inner: HTTP1Channel(
                responder: responder,
                configuration: .init(additionalChannelHandlers: additionalChannelHandlers(), idleTimeout: TimeAmount(idleTimeout))))
        }
    }
}

/// Hummingbird's HTTP/1 channel with ``ConnectionPersistence`` ahead of its conversion to
/// version-less requests.
struct HTTP10Aware: ServerChildChannel {
    let inner: HTTP1Channel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
        inner.setup(channel: channel, logger: logger).flatMapThrowing { value in
            let codec = try channel.pipeline.syncOperations.handler(type: HTTP1ToHTTPServerCodec.self)
            try channel.pipeline.syncOperations.addHandler(ConnectionPersistence(), position: .before(codec))
            return value
        }
    }

    func handle(value: HTTP1Channel.Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger)
    }
}

/// Whether a connection persists after a request (RFC 9112 §9.3, ``HTTPRequestHead/persists``:
/// a `close` token in any `Connection` header, in any case, closes it; else HTTP/1.0 closes unless
/// `keep-alive`, and HTTP/1.1 persists). A request that closes its connection is passed on with
/// exactly `Connection: close` (the form Hummingbird closes for) and its answer says
/// `Connection: close`; an HTTP/1.0 request that keeps it gets `Connection: keep-alive` on its
/// answer, which a 1.0 client needs to reuse the connection. An HTTP/1.1 request that keeps it
/// passes untouched.
final class ConnectionPersistence: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Per request not yet answered, in order: nil to pass the answer untouched, else whether
    /// the connection persists.
    private var unanswered = CircularBuffer<Bool?>()

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var head) = unwrapInboundIn(data) else { return context.fireChannelRead(data) }
        let keepAlive = head.persists
        let http10 = head.version.major == 1 && head.version.minor == 0
        guard !keepAlive || http10 else {
            unanswered.append(nil)
            return context.fireChannelRead(data)
        }
        unanswered.append(keepAlive)
        if !keepAlive { head.headers.replaceOrAdd(name: "connection", value: "close") }
        context.fireChannelRead(wrapInboundOut(.head(head)))
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // An interim answer (1xx) leaves its request unanswered.
        guard case .head(var head) = unwrapOutboundIn(data), head.status.code >= 200, let persistence = unanswered.popFirst() else {
            return context.write(data, promise: promise)
        }
        guard let keepAlive = persistence else { return context.write(data, promise: promise) }
        head.headers.replaceOrAdd(name: "connection", value: keepAlive ? "keep-alive" : "close")
        context.write(wrapOutboundOut(.head(head)), promise: promise)
    }
}
