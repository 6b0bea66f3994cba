import ArgumentParser
import Foundation
import Pipeline
import Workers
import Kafka

/// The main job on the embedded local default: produce, pass through a stage in a consumer group, count.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Produce messages, pass them through a stage in a consumer group, print counts and rates.")

    @OptionGroup var connection: BootstrapServer<EmbeddedBroker>
    @Option(help: "How many messages to produce.") var messages = 100_000
    @Option(help: "Bytes per message value.") var size = 200
    @Option(help: "Partitions of the demo topics.") var partitions = 4

    func validate() throws {
        guard messages > 0 else { throw ValidationError("--messages must be positive, got \(messages)") }
        guard size >= 0 else { throw ValidationError("--size must not be negative, got \(size)") }
        guard partitions > 0 else { throw ValidationError("--partitions must be positive, got \(partitions)") }
    }

    func run() async throws {
        try Preflight.checkRuntime()
        try await withBootstrap(connection.servers) { servers in
            let input = "demo.input", output = "demo.output", deadLetters = "demo.dead-letters"
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: servers))
            for topic in [input, output, deadLetters] {
                try await admin.createTopic(TopicSpec(name: topic, partitions: partitions), ignoreExisting: true)
            }
            print("topics \(input), \(output) and \(deadLetters): \(partitions) partitions")

            // 1. Produce.
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: servers))
            let value = [UInt8](repeating: UInt8(ascii: "x"), count: size)
            let clock = ContinuousClock()
            let produceStart = clock.now
            var delivered = 0
            let chunk = 10_000
            for start in stride(from: 0, to: messages, by: chunk) {
                let batch = (start..<min(start + chunk, messages)).map {
                    ProducerRecord(topic: input, key: Array("key-\($0 % 1000)".utf8), value: value)
                }
                let reports = try await producer.send(batch)
                if let error = reports.first(where: { $0.error != nil })?.error { throw error }
                delivered += reports.count
            }
            print("produced:  \(formatRate(delivered, clock.now - produceStart))")

            // 2. Run the pass-through stage as a worker would: its consumer group, outputs, commits.
            let topology = try Topology.parse("""
                topics:
                  - {name: \(input), partitions: \(partitions)}
                  - {name: \(output), partitions: \(partitions)}
                  - {name: \(deadLetters), partitions: 1}
                stages:
                  - name: demo-pass-through
                    chain: [pass-through]
                    inputs: [\(input)]
                    outputs: {out: \(output)}
                    dead-letter-topic: \(deadLetters)
                """, source: "demo topology")
            var settings = WorkerSettings(bootstrapServers: servers)
            settings.sessionTimeout = .milliseconds(3000)
            settings.heartbeatInterval = .milliseconds(500)
            settings.stopAfterInputs = delivered
            let service = try StageService(
                definition: try topology.stage(named: "demo-pass-through"), topology: topology, settings: settings)
            let consumeStart = clock.now
            try await service.run()
            let elapsed = clock.now - consumeStart
            await producer.close()
            let counts = service.progress
            print("consumed:  \(formatRate(counts.inputsSettled, elapsed)) (includes joining the group)")
            print("forwarded: \(counts.produced) messages to \(output), \(counts.deadLettered) to \(deadLetters)")
            let committed = try await admin.committedOffsets(group: "demo-pass-through").reduce(Int64(0)) { $0 + $1.offset }
            await admin.close()
            print("committed offsets of group demo-pass-through add up to \(committed)")
            guard counts.inputsSettled == delivered, counts.produced == delivered, committed == Int64(delivered) else {
                throw ValidationError("counts do not match: produced \(delivered), consumed \(counts.inputsSettled), forwarded \(counts.produced), committed \(committed)")
            }
            print("ok: every message produced, consumed, forwarded and committed once")
        }
    }
}
