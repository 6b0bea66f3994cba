import Testing
@testable import Kafka

/// The statistics-based check that an idempotent producer is stuck bumping its own epoch (a
/// broker that lost its producer id refuses every bump; librdkafka repeats every few ms).
@Suite struct EpochBumpWatchTests {
    let t0 = ContinuousClock.now

    @Test func dozensOfBumpsBetweenTwoStatisticsAreTheLoop() {
        var watch = EpochBumpWatch()
        #expect(watch.observe(producerID: 7, epoch: 0, at: t0) == nil, "one reading says nothing")
        #expect(watch.observe(producerID: 7, epoch: 180, at: t0 + .seconds(1)) == 180)
    }

    @Test func aFewBumpsAndANewProducerIdAreNot() {
        var watch = EpochBumpWatch()
        _ = watch.observe(producerID: 7, epoch: 3, at: t0)
        // A timed-out batch bumps once; a slow run of them a few times a minute.
        #expect(watch.observe(producerID: 7, epoch: 4, at: t0 + .seconds(1)) == nil)
        #expect(watch.observe(producerID: 7, epoch: 12, at: t0 + .seconds(60)) == nil, "8 bumps in a minute is under 10 a second")
        // A new id from the broker starts its epochs again: not a bump.
        #expect(watch.observe(producerID: 8, epoch: 0, at: t0 + .seconds(61)) == nil)
        #expect(watch.observe(producerID: 8, epoch: 0, at: t0 + .seconds(62)) == nil)
        // Not idempotent, or no id yet (-1): nothing to watch.
        #expect(watch.observe(producerID: -1, epoch: -1, at: t0 + .seconds(63)) == nil)
        #expect(watch.observe(producerID: 8, epoch: 50, at: t0 + .seconds(64)) == nil, "no reading of this id just before")
    }

    @Test func theEpochWrapsAt32768() {
        var watch = EpochBumpWatch()
        _ = watch.observe(producerID: 7, epoch: 32760, at: t0)
        #expect(watch.observe(producerID: 7, epoch: 20, at: t0 + .seconds(1)) == 28)
    }

    @Test func statisticsCarryTheProducerIdAndEpoch() throws {
        let json = #"{"name":"p#producer-1","msg_cnt":0,"eos":{"idemp_state":"Assigned","producer_id":1001,"producer_epoch":42,"epoch_cnt":1}}"#
        let stats = try #require(KafkaStatistics(json: Array(json.utf8)))
        #expect(stats.producerID == 1001 && stats.producerEpoch == 42)
        let plain = try #require(KafkaStatistics(json: Array(#"{"name":"c#consumer-2"}"#.utf8)))
        #expect(plain.producerID == -1 && plain.producerEpoch == -1)
    }
}
