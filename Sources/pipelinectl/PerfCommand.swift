import ArgumentParser
import Foundation
import HTTPServing
import Kafka
import NIOPosix
import Pipeline

/// Throughput of the Swift API, for comparison with kcat on the same librdkafka (scripts/bench-kafka).
struct Perf: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure produce or consume throughput through the Swift Kafka API.",
        subcommands: [Produce.self, Consume.self])

    struct Produce: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Produce N messages of a given size and wait for every delivery.")
        @OptionGroup var connection: RequiredConnection
        @Option(help: "Topic to produce to.") var topic: String
        @Option(help: "Number of messages.") var messages = 1_000_000
        @Option(help: "Bytes per message value.") var size = 200
        @Option(help: "Messages per batch handed to the producer.") var batch = 1_000
        // 100 x 1,000 = 100,000 messages in flight by default: librdkafka's
        // queue.buffering.max.messages, the most kcat can have queued (scripts/bench-kafka).
        // Batches of 1,000 keep the queue evenly full: with 10 x 10,000 a new batch waits for a
        // whole old one (BENCHMARKS.md compares the two).
        @Option(name: .customLong("in-flight"), help: "Batches handed to the producer and not yet acknowledged.") var inFlight = 100
        @Option(help: "Where delivery reports are served: 'loop' (one event loop, which also runs the producing task) or 'thread' (the producer's own thread; the task runs on Swift's pool).")
        var reports: Reports = .loop
        @Option(name: .customShort("X"), parsing: .singleValue, help: "Raw librdkafka property key=value (repeatable).") var properties: [String] = []

        enum Reports: String, ExpressibleByArgument, CaseIterable {
            case loop, thread
        }

        func validate() throws {
            guard messages > 0, batch > 0, inFlight > 0 else { throw ValidationError("--messages, --batch and --in-flight must be positive") }
            _ = try parseProperties(properties)
        }

        func run() async throws {
            try Preflight.checkRuntime()
            var config = ProducerConfiguration(kafka: connection.kafka)
            config.kafka.raw = try parseProperties(properties)
            let value = [UInt8](repeating: UInt8(ascii: "x"), count: size)
            let topic = topic  // read once: an @Option's getter per record was 1 % of the produce path's instructions
            let clock = ContinuousClock()
            // The client's whole life, for scripts/bench-kafka: kcat's wall clock has the same
            // steps (create, idempotent producer ID, send, flush, destroy) but no Swift runtime
            // start-up to load first.
            let created = clock.now
            // By default the reports are served on one event loop and the producing task runs
            // there too, as `ingest http` serves its posts: a batch of reports wakes one thread,
            // which goes on producing. With `--reports thread` the producer's own thread is woken
            // and wakes one of the pool's.
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let loop = group.next()
            let producer: KafkaProducer
            do {
                producer = try KafkaProducer(
                    configuration: config, serving: reports == .loop ? .scheduled { job in loop.execute(job) } : .thread)
            } catch {
                try? await group.shutdownGracefully()
                throw error
            }
            // The producer is closed and the loop shut down whatever the outcome.
            let result: Result<(failed: Int, elapsed: Duration), any Error> =
                await withTaskExecutorPreference(reports == .loop ? EventLoopTaskExecutor(loop) : nil) {
                    do { return .success(try await produceAll(producer, value: value, topic: topic, clock: clock)) } catch { return .failure(error) }
                }
            await producer.close()
            let lifetime = clock.now - created
            try await group.shutdownGracefully()
            let (failed, elapsed) = try result.get()
            print("produce: \(formatRate(messages - failed, elapsed)), \(failed) failed")
            print("seconds_from_create_to_close=\(lifetime.seconds)")
            if failed > 0 { throw ExitCode.failure }
        }

        /// One task enqueues batch after batch, as a worker's lane does, and waits for the oldest
        /// batch's reports whenever --in-flight batches are out: how many failed, and the time
        /// from the first batch to the last report.
        private func produceAll(_ producer: KafkaProducer, value: [UInt8], topic: String, clock: ContinuousClock) async throws -> (failed: Int, elapsed: Duration) {
            let start = clock.now
            var outstanding: [DeliveryTicket] = []
            outstanding.reserveCapacity(inFlight)
            var next = 0
            var failed = 0
            func failures(_ ticket: DeliveryTicket) async -> Int {
                await ticket.reports().reduce(0) { $0 + ($1.error == nil ? 0 : 1) }
            }
            while next < messages {
                if outstanding.count == inFlight { failed += await failures(outstanding.removeFirst()) }
                let count = min(batch, messages - next)
                next += count
                // Written straight into one buffer, as a worker writes its outputs.
                var records = ProducerBatch(reservingCapacity: count, bytesPerRecord: value.count)
                for _ in 0..<count { records.append(topic: topic, key: nil, value: value, timestamp: nil) }
                outstanding.append(try await producer.submit(records))
            }
            for ticket in outstanding { failed += await failures(ticket) }
            return (failed, clock.now - start)
        }
    }

    struct Consume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Consume N messages in a fresh consumer group.")
        @OptionGroup var connection: RequiredConnection
        @Option(help: "Topic to consume.") var topic: String
        @Option(help: "Stop after this many messages.") var messages = 1_000_000
        @Option(help: "Consumer group (default: a new one).") var group: String?
        @Flag(help: "Read every partition from the beginning without joining a group (kcat -C without -G).") var assign = false
        @Option(name: .customShort("X"), parsing: .singleValue, help: "Raw librdkafka property key=value (repeatable).") var properties: [String] = []

        func validate() throws {
            guard messages > 0 else { throw ValidationError("--messages must be positive") }
            _ = try parseProperties(properties)
        }

        func run() async throws {
            try Preflight.checkRuntime()
            var config = ConsumerConfiguration(
                kafka: connection.kafka,
                groupID: group ?? "perf-\(UUID().uuidString.prefix(8))")
            config.sessionTimeout = .milliseconds(2000)
            config.heartbeatInterval = .milliseconds(500)
            config.kafka.raw = try parseProperties(properties)
            let consumer = try KafkaConsumer(configuration: config)
            if assign {
                let admin = try KafkaAdmin(configuration: connection.kafka)
                let partitions = try await admin.describeTopic(topic).partitions
                await admin.close()
                try await consumer.assign((0..<partitions).map { TopicPartitionOffset(topic, Int32($0), offset: TopicPartitionOffset.beginning) })
            } else {
                try consumer.subscribe([topic])
            }
            let clock = ContinuousClock()
            let start = clock.now
            var firstRecord: ContinuousClock.Instant?
            var count = 0
            var bytes = 0
            for try await event in consumer {
                guard case .records(let batch) = event else { continue }
                if firstRecord == nil { firstRecord = clock.now }
                count += batch.count
                for r in batch { bytes += r.valueBytes?.count ?? 0 }
                try consumer.store(batch)
                if count >= messages { break }
            }
            let end = clock.now
            try await consumer.close()
            print("consume: \(formatRate(count, end - start)) including start-up\(assign ? "" : " and group join"); \(formatRate(count, end - (firstRecord ?? start))) from the first record; \(bytes) value bytes")
            // For scripts/bench-kafka: seconds from the first record to the last.
            print("seconds_from_first_record=\((end - (firstRecord ?? start)).seconds)")
        }
    }
}

func parseProperties(_ pairs: [String]) throws -> [String: String] {
    var result: [String: String] = [:]
    for pair in pairs {
        guard let eq = pair.firstIndex(of: "="), eq != pair.startIndex else {
            throw ValidationError("-X '\(pair)': expected key=value")
        }
        result[String(pair[..<eq])] = String(pair[pair.index(after: eq)...])
    }
    return result
}
