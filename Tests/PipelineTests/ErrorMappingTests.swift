import CKafka
import Testing
@testable import Pipeline

@Suite struct ErrorMappingTests {
    @Test func queueFullIsRetriable() {
        let e = RDKafkaError.make(RD_KAFKA_RESP_ERR__QUEUE_FULL)
        #expect(e.code == .queueFull)
        #expect(e.isRetriable)
        #expect(!e.isFatal)
        #expect(e.rdKafkaCode == RD_KAFKA_RESP_ERR__QUEUE_FULL.rawValue)
    }

    @Test func timeoutsMapToTimedOut() {
        let e = RDKafkaError.make(RD_KAFKA_RESP_ERR__TIMED_OUT, code: .broker)
        #expect(e.code == .timedOut)
        #expect(e.isRetriable)
    }

    @Test func fatalIsFatal() {
        let e = RDKafkaError.make(RD_KAFKA_RESP_ERR__FATAL)
        #expect(e.isFatal)
        #expect(!e.isRetriable)
    }

    @Test func brokerErrorsKeepTheirCodeAndName() {
        let e = RDKafkaError.make(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, code: .broker, context: "produce to t")
        #expect(e.code == .broker)
        #expect(!e.isRetriable)
        #expect(e.rdKafkaCode == 29)
        #expect(e.message.hasPrefix("produce to t: TOPIC_AUTHORIZATION_FAILED"))
        #expect(RDKafkaError.make(RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION).isRetriable)
    }
}
