import Kafka
/// What applying a topology's topics to a cluster did and found.
public struct TopologyApplyReport: Sendable {
    public var created: [String] = []
    public var unchanged: [String] = []
    /// Topics that exist but differ from the topology (never changed by `apply`).
    public var drift: [String] = []
}

extension Topology {
    /// Creates the topics that are missing; reports those that exist with other partition
    /// counts or cleanup policies, and changes nothing else.
    public func apply(using admin: KafkaAdmin) async throws(KafkaError) -> TopologyApplyReport {
        var report = TopologyApplyReport()
        let existing = Dictionary(try await admin.listTopics().map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        for topic in topics {
            if let found = existing[topic.name] {
                var differences: [String] = []
                if found.partitions != topic.partitions {
                    differences.append("partitions \(found.partitions), topology says \(topic.partitions)")
                }
                if let wanted = topic.config["cleanup.policy"], let actual = found.cleanupPolicy, actual != wanted {
                    differences.append("cleanup.policy \(actual), topology says \(wanted)")
                }
                if differences.isEmpty {
                    report.unchanged.append(topic.name)
                } else {
                    report.drift.append("\(topic.name): " + differences.joined(separator: "; "))
                }
            } else {
                try await admin.createTopic(
                    TopicSpec(name: topic.name, partitions: topic.partitions, replicationFactor: topic.replicationFactor, config: topic.config),
                    ignoreExisting: true)
                report.created.append(topic.name)
            }
        }
        return report
    }
}
