import ArgumentParser
import Pipeline

struct Topics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, create and delete topics.",
        subcommands: [List.self, Create.self, Delete.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List topics with partitions and cleanup policy.")
        @OptionGroup var connection: RequiredConnection

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: connection.servers))
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
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: connection.servers))
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
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: connection.servers))
            try await admin.deleteTopic(name)
            await admin.close()
            print("deleted \(name)")
        }
    }
}
