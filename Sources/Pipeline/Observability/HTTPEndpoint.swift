import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle
import Synchronization
import Kafka

/// A long-running process's HTTP endpoint (a worker's, an ingest service's): `/metrics`
/// (Prometheus text format), `/healthz` and `/readyz` (200 or 503 with the reason). A `Service`: it listens until graceful shutdown; in a
/// `ServiceGroup` list it before the stage so that it stops last.
public final class HTTPEndpoint: Service, Sendable {
    public let host: String
    public let requestedPort: Int
    let registry: PrometheusCollectorRegistry
    let health: any HealthReporting
    let logger: Logger
    /// A connection that sends nothing for this long is closed; a scraper's kept-alive connection
    /// between scrapes stays (Prometheus scrapes a minute apart by default). Without it, a
    /// connection opened and left silent would hold its socket for good.
    let idleTimeout: Duration
    /// Where connections are served (a test gives the endpoint a loop of its own).
    let group: any EventLoopGroup
    /// On a loopback address, the names a request may carry in `Host` (421 otherwise): a page of
    /// another site made to resolve to 127.0.0.1 (DNS rebinding) would read the metrics in the
    /// browser of someone on this machine. Elsewhere any name: Prometheus scrapes by the names
    /// its targets are given.
    let hosts: HostPolicy?
    private let bound = Mutex<(port: Int?, waiters: [CheckedContinuation<Int, any Error>])>((nil, []))

    public init(
        address: String, registry: PrometheusCollectorRegistry, health: any HealthReporting, logger: Logger, idleTimeout: Duration = .seconds(120),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]), (0...65535).contains(port) else {
            throw EndpointError(description: "'\(address)' is not host:port (e.g. 0.0.0.0:9464, or 127.0.0.1:0 for any free port)")
        }
        self.host = String(address[..<colon])
        self.requestedPort = port
        self.registry = registry
        self.health = health
        self.logger = logger
        self.idleTimeout = idleTimeout
        self.group = group
        self.hosts = HostPolicy.isLoopback(host) ? HostPolicy(listening: host, allowed: []) : nil
    }

    public struct EndpointError: Error, CustomStringConvertible {
        public var description: String
    }

    /// The port it listens on, once it does (the requested one, or the one the kernel chose for 0).
    public func port() async throws -> Int {
        try await withCheckedThrowingContinuation { c in
            let now = bound.withLock { s -> Int? in
                if let port = s.port { return port }
                s.waiters.append(c)
                return nil
            }
            if let now { c.resume(returning: now) }
        }
    }

    public func run() async throws {
        let registry = self.registry, health = self.health, idle = TimeAmount(idleTimeout), hosts = self.hosts
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // The idle timeout first: it sees every byte read.
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: idle))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(EndpointHandler(registry: registry, health: health, hosts: hosts))
                }
            }
            .bind(host: host, port: requestedPort).get()
        let port = channel.localAddress?.port ?? requestedPort
        let waiters = bound.withLock { s in
            s.port = port
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume(returning: port) }
        logger.info("metrics and health endpoint listening on \(host):\(port)", metadata: ["port": "\(port)"])
        try? await gracefulShutdown()
        try await channel.close()
    }
}

/// What `/healthz` and `/readyz` answer.
public protocol HealthReporting: Sendable {
    func liveness(now: ContinuousClock.Instant) -> HealthStatus
    func readiness(now: ContinuousClock.Instant) -> HealthStatus
}

public struct HealthStatus: Sendable, Equatable {
    public var ok: Bool
    public var reason: String
    public init(ok: Bool, reason: String) {
        self.ok = ok
        self.reason = reason
    }
}

/// Answers one request per head/end pair.
private final class EndpointHandler: ChannelInboundHandler, @unchecked Sendable {  // confined to its channel's event loop
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let registry: PrometheusCollectorRegistry
    let health: any HealthReporting
    let hosts: HostPolicy?
    private var path = ""
    private var keepAlive = true
    /// The request's `Host` is not one this endpoint answers to (``HTTPEndpoint/hosts``).
    private var misdirected = false

    init(registry: PrometheusCollectorRegistry, health: any HealthReporting, hosts: HostPolicy?) {
        self.registry = registry
        self.health = health
        self.hosts = hosts
    }

    /// Nothing read for the idle timeout (`IdleStateHandler`, first in the pipeline): closed.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
            keepAlive = head.isKeepAlive
            misdirected = hosts.map { !$0.allows(authority: head.headers.first(name: "host")) } ?? false
        case .body:
            break
        case .end:
            let (status, contentType, body): (HTTPResponseStatus, String, [UInt8])
            switch path {
            case _ where misdirected:
                (status, contentType, body) = (.misdirectedRequest, "text/plain; charset=utf-8",
                                               Array("this endpoint listens on a loopback address: reach it as localhost or by that address\n".utf8))
            case "/metrics":
                (status, contentType, body) = (.ok, "text/plain; version=0.0.4; charset=utf-8", registry.emitToBuffer())
            case "/healthz":
                let s = health.liveness(now: .now)
                (status, contentType, body) = (s.ok ? .ok : .serviceUnavailable, "text/plain; charset=utf-8", Array((s.reason + "\n").utf8))
            case "/readyz":
                let s = health.readiness(now: .now)
                (status, contentType, body) = (s.ok ? .ok : .serviceUnavailable, "text/plain; charset=utf-8", Array((s.reason + "\n").utf8))
            default:
                (status, contentType, body) = (.notFound, "text/plain; charset=utf-8", Array("not found: try /metrics, /healthz, /readyz\n".utf8))
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: contentType)
            headers.add(name: "Content-Length", value: String(body.count))
            if !keepAlive { headers.add(name: "Connection", value: "close") }
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            let keepAlive = self.keepAlive
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
                if !keepAlive { context.close(promise: nil) }
            }
        }
    }
}
