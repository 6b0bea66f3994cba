import Foundation
import NIOCore
import NIOWebSocket
import PipelineTesting
import Synchronization
import Testing
import Workers
import WorkersTesting
@testable import Pipeline
@testable import Kafka
@testable import Operations
@testable import Producers

/// The WebSocket feed against a local NIO WebSocket server on a free port: subscription, text,
/// binary and fragmented messages, ping/pong both ways, drops, close frames, backoff, stop.
@Suite(.timeLimit(.minutes(3))) struct TickerFeedTests {
    static let codes = ["KRW-BTC", "KRW-ETH", "KRW-XRP"]
    static let subscription = UpbitTicker.subscription(ticket: "ticket-1", codes: codes)

    static func ticker(_ i: Int) -> String {
        #"{"type":"ticker","code":"\#(codes[i % 3])","trade_price":\#(31_883_000 + i).00000000,"signed_change_rate":-8.4e-05,"seq":\#(i),"stream_type":"REALTIME"}"#
    }

    static func configuration(_ server: WebSocketTestServer) throws -> WebSocketFeed.Configuration {
        var configuration = WebSocketFeed.Configuration(endpoint: try WebSocketEndpoint(url: server.url()), subscription: [subscription])
        configuration.reconnect.initialDelay = .milliseconds(20)
        return configuration
    }

    struct Seen {
        var messages: [WebSocketMessage] = []
        var connected: [Int] = []
        var disconnects: [String] = []
        var connectFailures: [String] = []
    }

    /// Iterates until `count` messages arrived (or the feed ends).
    static func collect(_ feed: WebSocketFeed, messages count: Int) async throws -> Seen {
        var seen = Seen()
        for try await event in feed {
            switch event {
            case .message(let m):
                seen.messages.append(m)
                if seen.messages.count == count { return seen }
            case .connected(let n): seen.connected.append(n)
            case .disconnected(let reason, _): seen.disconnects.append(reason)
            case .connectFailed(let reason, _): seen.connectFailures.append(reason)
            }
        }
        return seen
    }

    @Test func yieldsEveryMessageInOrderAcrossADropAndSubscribesAgain() async throws {
        let subscriptions = Mutex<[String]>([])
        let pongs = Mutex<[String?]>([])
        let server = try await WebSocketTestServer.start { peer in
            guard let subscription = try await peer.receiveText() else { return }
            subscriptions.withLock { $0.append(subscription) }
            // 30 messages on the first connection, the other 30 on the next: even ones as text,
            // odd ones binary (as Upbit sends them), two of them in fragments.
            for i in peer.number == 1 ? 0..<30 : 30..<60 {
                let bytes = Array(Self.ticker(i).utf8)
                let opcode: WebSocketOpcode = i.isMultiple(of: 2) ? .text : .binary
                if i == 10 || i == 41 {
                    try await peer.sendFragmented(opcode, bytes, parts: 3)
                } else if opcode == .text {
                    try await peer.send(text: Self.ticker(i))
                } else {
                    try await peer.send(binary: bytes)
                }
            }
            if peer.number == 1 {
                let (pong, _) = try await peer.ping("are-you-there")
                pongs.withLock { $0.append(pong) }
                return  // drops the connection: no close frame
            }
            try await peer.waitForClose()
        }
        let seen = try await Self.collect(WebSocketFeed(configuration: try Self.configuration(server)), messages: 60)
        await server.close()

        #expect(seen.messages.map(\.text) == (0..<60).map(Self.ticker), "every message once, in order, across the drop")
        #expect(seen.messages.map(\.kind) == (0..<60).map { $0.isMultiple(of: 2) ? .text : .binary })
        #expect(seen.connected == [1, 2], "one reconnect")
        #expect(seen.disconnects.count == 1)
        #expect(seen.connectFailures.isEmpty)
        #expect(subscriptions.withLock { $0 } == [Self.subscription, Self.subscription], "subscribed again on the new connection")
        #expect(pongs.withLock { $0 } == ["are-you-there"], "the server's ping was answered with its payload")
        #expect(server.requestTargets == ["/websocket/v1", "/websocket/v1"])
    }

    @Test func pingsTheServerAndReplacesAConnectionThatWentSilent() async throws {
        let clientPings = Mutex<[(payload: String, masked: Bool)]>([])
        // Counted by subscription, not by connection: under load a client may give up on a
        // connection the server already accepted, and retry.
        let subscribed = Mutex(0)
        let (silentEnded, silentEnd) = AsyncStream.makeStream(of: Void.self)
        let server = try await WebSocketTestServer.start { peer in
            guard try await peer.receiveText() != nil else { return }
            let n = subscribed.withLock { $0 += 1; return $0 }
            if n == 1 {
                // Silent: read the client's pings, never answer. The client must give up on us.
                defer { silentEnd.finish() }
                while let (frame, masked) = try await peer.receiveChecked() {
                    if frame.opcode == .ping { clientPings.withLock { $0.append((String(buffer: frame.data), masked)) } }
                }
                return
            }
            try await peer.send(text: Self.ticker(0))
            try await peer.waitForClose()
        }
        var configuration = try Self.configuration(server)
        configuration.pingInterval = .milliseconds(200)
        configuration.idleTimeout = .seconds(3)
        let seen = try await Self.collect(WebSocketFeed(configuration: configuration), messages: 1)
        // The server reads the silent connection's frames in its own task, which a loaded machine
        // may run long after the client has moved on (CI runs saw 0 pings after waiting 10 s for
        // them): they are in its socket buffer; wait until it has read to the client's close.
        for await _ in silentEnded {}
        await server.close()

        #expect(seen.messages.map(\.text) == [Self.ticker(0)])
        // The silent connection is replaced; on a loaded machine a slow answer on the next one
        // may be taken for silence too, so more than one reconnect is allowed, never fewer.
        #expect(seen.connected.count >= 2, "at least one reconnect: \(seen.connected)")
        #expect(seen.disconnects.count == seen.connected.count - 1)
        #expect(seen.disconnects.first?.contains("nothing received for") == true, "\(seen.disconnects)")
        let pings = clientPings.withLock { $0 }
        // Never fewer than 2, even when the client's event loop stalls past the idle timeout: the
        // connection is dropped only once a ping has gone unanswered for a ping interval, and a
        // ping interval without writing sends another.
        #expect(pings.count >= 2, "a ping every 200 ms of not writing, before the 3 s idle timeout")
        #expect(pings.allSatisfy { $0.masked }, "client frames are masked (RFC 6455 5.3)")
    }

    @Test func answersACloseFrameAndReconnects() async throws {
        let echoed = Mutex<[UInt16?]>([])
        let server = try await WebSocketTestServer.start { peer in
            guard try await peer.receiveText() != nil else { return }
            try await peer.send(binary: Array(Self.ticker(peer.number).utf8))
            if peer.number == 1 {
                try await peer.sendClose(code: 1001, reason: "going away")
                while let frame = try await peer.receive() {
                    guard frame.opcode == .connectionClose else { continue }
                    var data = frame.data
                    echoed.withLock { $0.append(data.readInteger(as: UInt16.self)) }
                    break
                }
                return
            }
            try await peer.waitForClose()
        }
        let seen = try await Self.collect(WebSocketFeed(configuration: try Self.configuration(server)), messages: 2)
        await server.close()

        #expect(seen.messages.map(\.text) == [Self.ticker(1), Self.ticker(2)])
        #expect(seen.connected == [1, 2])
        #expect(seen.disconnects == ["closed by the server (code 1001: going away)"])
        #expect(echoed.withLock { $0 } == [1001], "the close frame is answered with its code")
    }

    @Test func backsOffAndGivesUpAfterTheConfiguredFailuresInARow() async throws {
        // A port nobody listens on any more.
        let gone = try await WebSocketTestServer.start { _ in }
        await gone.close()
        var configuration = try Self.configuration(gone)
        configuration.reconnect.maxAttempts = 3
        let feed = WebSocketFeed(configuration: configuration)
        var failures: [Duration] = []
        let error = await #expect(throws: WebSocketFeedError.self) {
            for try await event in feed {
                if case .connectFailed(_, let retryIn) = event { failures.append(retryIn) }
            }
        }
        #expect(failures.count == 2, "two waits, then the third failure gives up")
        if case .gaveUp(let attempts, _) = error { #expect(attempts == 3) } else { Issue.record("expected gaveUp, got \(String(describing: error))") }
        // 20 ms then 40 ms, each ± 25 %.
        #expect(failures.count == 2 && failures[0] >= .milliseconds(15) && failures[0] <= .milliseconds(25))
        #expect(failures.count == 2 && failures[1] >= .milliseconds(30) && failures[1] <= .milliseconds(50))
    }

    @Test func stopClosesTheConnectionAndStillYieldsWhatWasReceived() async throws {
        let (read, readSignal) = AsyncStream<Void>.makeStream()
        let server = try await WebSocketTestServer.start { peer in
            guard try await peer.receiveText() != nil else { return }
            for i in 0..<5 { try await peer.send(text: Self.ticker(i)) }
            // The pong comes after the client read all five.
            _ = try await peer.ping("sync")
            readSignal.yield()
            try await peer.waitForClose()
        }
        let feed = WebSocketFeed(configuration: try Self.configuration(server))
        var iterator = feed.makeAsyncIterator()
        #expect(try await iterator.next() == .connected(number: 1))
        for await _ in read { break }
        feed.stop()
        var after: [WebSocketFeedEvent] = []
        while let event = try await iterator.next() { after.append(event) }
        await server.close()
        #expect(after == (0..<5).map { .message(WebSocketMessage(kind: .text, bytes: Array(Self.ticker($0).utf8))) },
                "the five received before stop(), then the end: no reconnect")
    }

    // MARK: Pure parts


    @Test func backoffDoublesUpToTheMaximumWithinTheJitter() {
        var policy = ReconnectPolicy()
        policy.jitter = 0
        var random = SplitMix64(seed: 1)
        #expect((1...9).map { policy.delay(failures: $0, using: &random) }
                == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(30), .seconds(30), .seconds(30)])
        policy.jitter = 0.25
        var seen = Set<Duration>()
        for _ in 0..<200 {
            let d = policy.delay(failures: 3, using: &random)
            #expect(d >= .milliseconds(1500) && d <= .milliseconds(2500))
            seen.insert(d)
            #expect(policy.delay(failures: 20, using: &random) <= .seconds(30), "jitter never goes past the maximum")
        }
        #expect(seen.count > 100, "the waits are spread, not one value")
    }

    @Test func endpointsParse() throws {
        let ws = try WebSocketEndpoint(url: "ws://127.0.0.1:8765/websocket/v1?x=1")
        #expect(ws == (try WebSocketEndpoint(url: "WS://127.0.0.1:8765/websocket/v1?x=1")))
        #expect(!ws.tls && ws.host == "127.0.0.1" && ws.port == 8765 && ws.target == "/websocket/v1?x=1")
        #expect(ws.hostHeader == "127.0.0.1:8765")
        let wss = try WebSocketEndpoint(url: UpbitTicker.url)
        #expect(wss.tls && wss.host == "api.upbit.com" && wss.port == 443 && wss.target == "/websocket/v1" && wss.hostHeader == "api.upbit.com")
        #expect(try WebSocketEndpoint(url: "ws://[::1]:9000").hostHeader == "[::1]:9000")
        #expect(try WebSocketEndpoint(url: "ws://example.com").target == "/")
        #expect(throws: WebSocketFeedError.self) { try WebSocketEndpoint(url: "http://example.com/") }
        #expect(throws: WebSocketFeedError.self) { try WebSocketEndpoint(url: "ws:///nohost") }
    }

    @Test func subscriptionIsUpbitsFormat() throws {
        #expect(UpbitTicker.subscription(ticket: "t-1", codes: ["KRW-BTC", "KRW-ETH"])
                == #"[{"ticket":"t-1"},{"type":"ticker","codes":["KRW-BTC","KRW-ETH"]},{"format":"DEFAULT"}]"#)
    }

    @Test func tickerMessagesAreKeyedByMarketCodeAndOthersRejected() throws {
        let messages = TickerMessages()
        func records(_ text: String, _ kind: WebSocketMessage.Kind = .binary) -> Result<[ProducerRecord], TickerRejection> {
            messages.records(from: WebSocketMessage(kind: kind, bytes: Array(text.utf8)), number: 1)
        }
        let ticker = Self.ticker(1)
        let one = try records(ticker).get()
        #expect(one == [ProducerRecord(topic: "prices.raw", key: Array("KRW-ETH".utf8), value: Array(ticker.utf8))], "exact bytes, keyed by code")
        // A REST-style array: one record per element, keyed by `market`.
        let rest = try records(#"[{"market":"KRW-BTC","trade_price":1},{"market":"KRW-XRP","trade_price":2}]"#, .text).get()
        #expect(rest.map { String(decoding: $0.key ?? [], as: UTF8.self) } == ["KRW-BTC", "KRW-XRP"])
        #expect(rest.map { String(decoding: $0.value ?? [], as: UTF8.self) } == [#"{"market":"KRW-BTC","trade_price":1}"#, #"{"market":"KRW-XRP","trade_price":2}"#])
        #expect(TickerMessages(topic: "t").records(from: WebSocketMessage(kind: .text, bytes: Array(ticker.utf8)), number: 1).map { $0.map(\.topic) } == .success(["t"]))

        func reason(_ text: String) -> String? {
            if case .failure(let r) = records(text) { return r.reason }
            return nil
        }
        #expect(reason("not json") == "not valid JSON")
        #expect(reason(#"{"status":"UP"}"#) == "no market code (code or market)")
        #expect(reason(#"{"type":"trade","code":"KRW-BTC"}"#) == "type trade, not ticker")
        #expect(reason(#""KRW-BTC""#)?.hasPrefix("expected a JSON object") == true)
        #expect(reason("[]") == "an empty array")
    }
}
