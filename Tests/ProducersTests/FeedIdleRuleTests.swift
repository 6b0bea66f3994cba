import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing
@testable import Producers

/// The feed's rule for a silent connection, on an embedded channel with the idle events fired by
/// hand: it is dropped only once a ping has gone unanswered for a ping interval. (A process whose
/// event loop stalled fires the write and read idle events in one turn; without the rule it
/// dropped a connection it had never pinged.)
@Suite struct FeedIdleRuleTests {
    static func connection(pingInterval: Duration) async throws -> (EmbeddedChannel, WebSocketConnection.Messages) {
        let channel = EmbeddedChannel()
        var configuration = WebSocketFeed.Configuration(endpoint: try WebSocketEndpoint(url: "ws://127.0.0.1:9/"), subscription: [])
        configuration.pingInterval = pingInterval
        let messages = try FeedHandler.install(on: channel, configuration)
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).get()
        return (channel, messages)
    }

    static func pings(_ channel: EmbeddedChannel) throws -> Int {
        var n = 0
        while let frame = try channel.readOutbound(as: WebSocketFrame.self) {
            #expect(frame.opcode == .ping && frame.maskKey != nil, "a masked ping: \(frame.opcode)")
            n += 1
        }
        return n
    }

    @Test func silenceBeforeAnyPingSendsOneInsteadOfDropping() async throws {
        let (channel, _) = try await Self.connection(pingInterval: .seconds(3600))
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(try Self.pings(channel) == 1)
        #expect(channel.isActive, "never pinged: not yet proof of a dead connection")
        // In the same turn again: the ping had no time to be answered.
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(channel.isActive, "the ping is younger than a ping interval")
        _ = try? await channel.close().get()
    }

    @Test func silenceAfterAnUnansweredPingDrops() async throws {
        let (channel, messages) = try await Self.connection(pingInterval: .nanoseconds(1))
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.write)
        #expect(try Self.pings(channel) == 1)
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(!channel.isActive, "pinged a ping interval ago, nothing read since: dead")
        var iterator = messages.makeAsyncIterator()
        await #expect(throws: WebSocketFeedError.idleTimeout(.seconds(75))) { _ = try await iterator.next() }
    }

    @Test func anythingReadAnswersThePing() async throws {
        let (channel, _) = try await Self.connection(pingInterval: .nanoseconds(1))
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.write)
        try channel.writeInbound(WebSocketFrame(fin: true, opcode: .pong, data: ByteBuffer(string: "pipelinectl")))
        channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(try Self.pings(channel) == 2, "the pong answered the first ping: the silence gets a new one")
        #expect(channel.isActive)
        _ = try? await channel.close().get()
    }
}
