import Foundation
import PipelineTesting
import Synchronization
import Testing
@testable import Pipeline
@testable import Kafka
@testable import Operations
@testable import Producers

/// `pipelinectl ingest upbit` as a process: from a local WebSocket server (port 0) that drops the
/// connection mid-stream, into a topic on the real local broker.
@Suite(.timeLimit(.minutes(3))) struct IngestCommandTests {
    static let codes = ["KRW-BTC", "KRW-ETH", "KRW-XRP"]

    static func ticker(_ i: Int) -> String {
        #"{"type":"ticker","code":"\#(codes[i % 3])","trade_price":\#(812 + i).0,"change":"FALL","trade_volume":1.5e+03,"seq":\#(i),"stream_type":"REALTIME"}"#
    }

    /// The subscription's parts: the ticket, and the rest (which must be Upbit's ticker request).
    static func parse(subscription: String) -> (ticket: String?, request: [NSDictionary]) {
        guard let parts = (try? JSONSerialization.jsonObject(with: Data(subscription.utf8))) as? [[String: Any]], parts.count == 3 else { return (nil, []) }
        return (parts[0]["ticket"] as? String, parts.dropFirst().map { $0 as NSDictionary })
    }

    @Test func ingestsEveryTickerAcrossADropKeyedByMarketCode() async throws {
        try await LocalBroker.with { broker in
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "prices.raw", partitions: 3))
            await admin.close()
            let subscriptions = Mutex<[String]>([])
            let server = try await WebSocketTestServer.start { peer in
                guard let subscription = try await peer.receiveText() else { return }
                subscriptions.withLock { $0.append(subscription) }
                if peer.number == 1 {
                    for i in 0..<30 {
                        if i == 15 { try await peer.send(text: #"{"status":"UP"}"#) }  // not a ticker: counted, not produced
                        if i.isMultiple(of: 2) { try await peer.send(binary: Array(Self.ticker(i).utf8)) } else { try await peer.send(text: Self.ticker(i)) }
                    }
                    _ = try await peer.ping("mid-stream")
                    return  // the drop
                }
                for i in 30..<60 { try await peer.send(binary: Array(Self.ticker(i).utf8)) }
                try await peer.waitForClose()
            }
            let run = try await OperatorCommandTests.pipelinectl(
                ["ingest", "upbit", "--url", server.url(), "--codes", Self.codes.joined(separator: ","), "--max-messages", "60",
                 "--reconnect-delay", "50ms", "--json"],
                bootstrap: broker.bootstrapServers)
            await server.close()
            #expect(run.status == 4, "exit 4: one message rejected\n\(run.stdout)\n\(run.stderr)")
            let summary = try JSONDecoder().decode(TickerIngest.Summary.self, from: Data(run.stdout.utf8))
            #expect(summary.produced == 60)
            #expect(summary.messages == 61)
            #expect(summary.rejected == 1)
            #expect(summary.reconnects == 1)
            #expect(summary.failed == 0 && summary.error == nil)
            #expect(run.stderr.contains("rejected message 16"), "\(run.stderr)")

            let sent = subscriptions.withLock { $0 }
            #expect(sent.count == 2, "subscribed, and again after the drop")
            let parsed = sent.map(Self.parse)
            #expect(parsed.allSatisfy { $0.request == [["type": "ticker", "codes": Self.codes], ["format": "DEFAULT"]] as [NSDictionary] }, "\(sent)")
            #expect(parsed.first?.ticket != nil && parsed.first?.ticket == parsed.last?.ticket)

            // Read to the end of every partition: exactly 60, none twice, keyed by market code,
            // each market's tickers in order.
            let records = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
            #expect(records.count == 60)
            let values = records.map { String(decoding: $0.value ?? [], as: UTF8.self) }
            #expect(Set(values) == Set((0..<60).map(Self.ticker)))
            #expect(Set(values).count == records.count, "no duplicates")
            for market in Self.codes {
                let mine = records.filter { $0.key == Array(market.utf8) }
                #expect(Set(mine.map(\.partition)).count == 1, "one market, one partition")
                let seqs = mine.sorted { $0.offset < $1.offset }.map { String(decoding: $0.value ?? [], as: UTF8.self) }
                #expect(seqs == (0..<60).filter { Self.codes[$0 % 3] == market }.map(Self.ticker), "\(market) in order, keyed by its code")
            }
        }
    }

    @Test func sigtermClosesTheFeedAndProducesWhatWasReceived() async throws {
        try await LocalBroker.with { broker in
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            try await admin.createTopic(TopicSpec(name: "prices.raw", partitions: 1))
            await admin.close()
            let (received, receivedSignal) = AsyncStream<Void>.makeStream()
            let server = try await WebSocketTestServer.start { peer in
                guard try await peer.receiveText() != nil else { return }
                for i in 0..<10 { try await peer.send(binary: Array(Self.ticker(i).utf8)) }
                _ = try await peer.ping("sync")  // answered after the ten were read
                receivedSignal.yield()
                try await peer.waitForClose()
            }
            let process = try ManagedProcess.launch(
                try WorkerProcessTests.pipelinectl(),
                arguments: ["ingest", "upbit", "--url", server.url(), "--codes", "KRW-BTC", "--bootstrap-server", broker.bootstrapServers],
                environment: ["NO_COLOR": "1"])
            for await _ in received { break }
            process.terminate()
            let status = await process.waitForExit()
            await server.close()
            let output = process.output()
            #expect(status == 0, "\(output)")
            #expect(output.contains("produced 10 records to prices.raw from 10 messages"), "\(output)")
            let records = try await OperatorCommandTests.readAll("prices.raw", bootstrap: broker.bootstrapServers)
            #expect(records.map { String(decoding: $0.value ?? [], as: UTF8.self) } == (0..<10).map(Self.ticker))
        }
    }
}
