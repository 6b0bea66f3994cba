import ArgumentParser
import Pipeline
import Kafka

struct Topics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, create, delete topics, or apply a topology's topics.",
        subcommands: [List.self, Create.self, Delete.self, Apply.self])

    struct Apply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create the topology's missing topics; report drift in partitions or cleanup policy (changes nothing else).",
            discussion: "Exit status 0 when every topic matches, 3 when some exist with other settings.")
        @OptionGroup var connection: RequiredConnection
        @Option(help: "The topology file.") var topology = "topology.yaml"

        func run() async throws {
            try Preflight.checkRuntime()
            let topology: Topology
            do { topology = try Topology.load(path: self.topology) } catch { throw ValidationError(error.description) }
            let admin = try KafkaAdmin(configuration: connection.kafka)
            let report = try await topology.apply(using: admin)
            await admin.close()
            for name in report.created { print("created   \(name)") }
            for name in report.unchanged { print("ok        \(name)") }
            for line in report.drift { print("drift     \(line)") }
            if !report.drift.isEmpty { throw ExitCode(3) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List topics with partitions and cleanup policy.")
        @OptionGroup var connection: RequiredConnection

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: connection.kafka)
            let topics = try await admin.listTopics()
            await admin.close()
            for topic in topics {
                print("\(topic.name)\tpartitions=\(topic.partitions)\tcleanup.policy=\(topic.cleanupPolicy ?? "unknown")")
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a topic.")
        @OptionGroup var connection: RequiredConnection
        @Argument(help: "Topic name.") var name: String
        @Option(help: "Number of partitions.") var partitions = 1
        @Option(name: .customLong("cleanup-policy"), help: "delete, compact or compact,delete.") var cleanupPolicy: String?

        func validate() throws {
            guard partitions > 0 else { throw ValidationError("--partitions must be positive, got \(partitions)") }
            if let cleanupPolicy, CleanupPolicy(rawValue: cleanupPolicy) == nil {
                throw ValidationError("--cleanup-policy: '\(cleanupPolicy)' is not one of delete, compact, compact,delete")
            }
        }

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: connection.kafka)
            try await admin.createTopic(TopicSpec(name: name, partitions: partitions, config: cleanupPolicy.map { ["cleanup.policy": $0] } ?? [:]))
            await admin.close()
            print("created \(name)")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a topic.")
        @OptionGroup var connection: RequiredConnection
        @Argument(help: "Topic name.") var name: String

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: connection.kafka)
            try await admin.deleteTopic(name)
            await admin.close()
            print("deleted \(name)")
        }
    }
}
