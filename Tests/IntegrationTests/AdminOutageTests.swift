import Foundation
import Operations
import Testing
@testable import Kafka

/// A broker that stops answering for longer than the admin timeout, then comes back: group
/// requests that timed out meanwhile must not take the process down. librdkafka 2.16 frees a
/// coordinator request's state when it times out while the coordinator is unreachable and
/// touches it again when the coordinator is back (librdkafka#4605, the fix proposed in #5397):
/// `rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed`, an abort. The
/// console died so within seconds of a broker resuming from a 30 s pause. In this shorter run,
/// the same client answered none of 15 group requests over 30 s after the resume.
@Suite(.timeLimit(.minutes(3))) struct AdminOutageTests {
    @Test func groupRequestsThatTimedOutDuringAPauseDoNotAbortWhenTheBrokerResumes() async throws {
        try await LocalBroker.with { broker in
            var kafka = KafkaConfiguration(bootstrapServers: [broker.bootstrapServers])
            // Requests in flight to the paused broker time out and drop its connection, so that
            // the later ones wait for the coordinator to be reachable again (as in a long pause).
            kafka.socketTimeout = .seconds(2)
            let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(2))
            try await admin.createTopic(TopicSpec(name: "t", partitions: 1))
            _ = try await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])
            broker.pause()
            // Each should time out. (In one fresh-clone CI run one of the four, on a fresh handle,
            // returned without an error while the broker was paused; not explained. The bug needs
            // only some to have timed out, so at least one must.)
            var timedOut = 0
            for request in ["committed offsets", "committed offsets", "describe", "committed offsets"] {
                do {
                    if request == "describe" { _ = try await admin.describeGroup("g") } else {
                        _ = try await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])
                    }
                    print("AdminOutageTests: \(request) was answered while the broker was paused")
                } catch {
                    timedOut += 1
                }
            }
            #expect(timedOut >= 1, "group requests timed out while the broker was paused: \(timedOut) of 4")
            broker.resume()
            // The same admin answers once the broker is back (the abandoned requests' handle was
            // replaced and destroyed).
            var answered = false
            for _ in 0..<15 where !answered {
                answered = (try? await admin.committedOffsets(group: "g", partitions: [TopicPartition("t", 0)])) != nil
            }
            #expect(answered)
            #expect(try await admin.describeGroup("g").group == "g")
            await admin.close()
        }
    }
}
