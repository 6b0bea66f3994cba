import Testing
@testable import Kafka

/// librdkafka codes (rdkafka.h): local errors are negative.
private enum Code {
    static let queueFull: Int32 = -184  // RD_KAFKA_RESP_ERR__QUEUE_FULL
    static let timedOut: Int32 = -185  // RD_KAFKA_RESP_ERR__TIMED_OUT
    static let fatal: Int32 = -150  // RD_KAFKA_RESP_ERR__FATAL
    static let notLeader: Int32 = 6  // RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION
    static let topicAuthorizationFailed: Int32 = 29
}

@Suite struct ErrorMappingTests {
    @Test func queueFullIsRetriable() {
        let e = RDKafkaError.make(rawCode: Code.queueFull)
        #expect(e.code == .queueFull)
        #expect(e.isRetriable)
        #expect(!e.isFatal)
        #expect(e.rdKafkaCode == Code.queueFull)
    }

    @Test func timeoutsMapToTimedOut() {
        let e = RDKafkaError.make(rawCode: Code.timedOut, code: .broker)
        #expect(e.code == .timedOut)
        #expect(e.isRetriable)
    }

    @Test func fatalIsFatal() {
        let e = RDKafkaError.make(rawCode: Code.fatal)
        #expect(e.isFatal)
        #expect(!e.isRetriable)
    }

    @Test func brokerErrorsKeepTheirCodeAndName() {
        let e = RDKafkaError.make(rawCode: Code.topicAuthorizationFailed, code: .broker, context: "produce to t")
        #expect(e.code == .broker)
        #expect(!e.isRetriable)
        #expect(e.rdKafkaCode == 29)
        #expect(e.message.hasPrefix("produce to t: TOPIC_AUTHORIZATION_FAILED"))
        #expect(RDKafkaError.make(rawCode: Code.notLeader).isRetriable)
        #expect("\(e)".contains("librdkafka code 29"))
    }
}
