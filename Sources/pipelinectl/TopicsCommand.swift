import ArgumentParser
import Pipeline

struct Topics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, create and delete topics.",
        subcommands: [List.self, Create.self, Delete.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List topics with partitions and cleanup policy.")
        @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port].") var bootstrapServer: String

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrapServer.split(separator: ",").map(String.init)))
            let topics = try await admin.listTopics()
            await admin.close()
            for topic in topics {
                print("\(topic.name)\tpartitions=\(topic.partitions)\tcleanup.policy=\(topic.cleanupPolicy ?? "unknown")")
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a topic.")
        @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers.") var bootstrapServer: String
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
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrapServer.split(separator: ",").map(String.init)))
            try await admin.createTopic(TopicSpec(name: name, partitions: partitions, config: cleanupPolicy.map { ["cleanup.policy": $0] } ?? [:]))
            await admin.close()
            print("created \(name)")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a topic.")
        @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers.") var bootstrapServer: String
        @Argument(help: "Topic name.") var name: String

        func run() async throws {
            try Preflight.checkRuntime()
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: bootstrapServer.split(separator: ",").map(String.init)))
            try await admin.deleteTopic(name)
            await admin.close()
            print("deleted \(name)")
        }
    }
}
