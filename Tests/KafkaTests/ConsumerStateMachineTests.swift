import Testing
@testable import Kafka

/// The consumer's lifecycle alone: no librdkafka, no threads. Waiters are plain numbers.
@Suite struct ConsumerStateMachineTests {
    typealias Machine = ConsumerStateMachine<Int, Int, Int>
    let tp0 = TopicPartition("t", 0)
    let tp1 = TopicPartition("t", 1)

    @Test func aDemandWaitsUntilThePollThreadDeliversIt() {
        var m = Machine()
        guard case .wait = m.next(1, cancelled: false) else { Issue.record("a first next() must wait"); return }
        #expect(m.pollerStep(serving: true).isDeliver)
        #expect(m.takeDemandToDeliver() == 1)
        #expect(m.deliveredEvents == 1)
        #expect(m.takeDemandToDeliver() == nil)
        #expect(m.pollerStep(serving: true).isWait)
    }

    @Test func aSecondIterationIsRefusedAndACancelledOneEnds() {
        var m = Machine()
        _ = m.next(1, cancelled: false)
        guard case .refuse = m.next(2, cancelled: false) else { Issue.record("two iterations at once"); return }
        #expect(m.cancelDemand() == 1)
        guard case .end = m.next(3, cancelled: true) else { Issue.record("a cancelled next() ends the sequence"); return }
    }

    @Test func positionChangesWaitForThePollThreadOutsideARebalanceAndAreDeferredInsideOne() {
        var m = Machine()
        guard case .queued = m.perform(.seek([TopicPartitionOffset("t", 0, offset: 5)]), done: 7) else { Issue.record("queued"); return }
        #expect(m.pollerStep(serving: true).isServeCommands)
        // Inside a rebalance callback the poll thread does not serve: the application is handling an event.
        #expect(!m.pollerStep(serving: false).isServeCommands)
        let taken = m.takeCommands()
        #expect(taken.count == 1 && taken[0].done == 7)

        m.rebalanceBegan(assigning: nil)
        _ = m.next(1, cancelled: false)
        _ = m.takeDemandToDeliver()
        guard case .deferred(let delivered) = m.perform(.seek([TopicPartitionOffset("t", 1, offset: 9)]), done: 8) else {
            Issue.record("a seek during the callback returns at once"); return
        }
        #expect(delivered == 1)
        #expect(m.pendingCommands.count == 1)
        _ = m.rebalanceAnswered()
        _ = m.assignmentMade()
        #expect(m.takeCommands().map(\.done) == [nil])
    }

    @Test func anAssignmentCollectsStartsPausesAndStoresUntilItIsMade() {
        var m = Machine()
        m.rebalanceBegan(assigning: [tp0])
        #expect(m.partitionsBeingAssigned == [tp0])
        #expect(m.startAssigned([TopicPartitionOffset("t", 0, offset: 42), TopicPartitionOffset("t", 1, offset: 3)]) == [TopicPartitionOffset("t", 1, offset: 3)])
        #expect(m.startAssigned([TopicPartitionOffset("t", 0, offset: 43)]) == nil)
        #expect(m.pauseAssigned([tp0, tp1]) == [tp1])
        #expect(m.storeAssigned([TopicPartitionOffset("t", 0, offset: 50)]).isEmpty)
        let answer = m.rebalanceAnswered()
        #expect(answer.starts == [tp0: 43])
        #expect(answer.paused == [tp0])
        // While it is being made, stores still wait for it.
        #expect(m.storeAssigned([TopicPartitionOffset("t", 0, offset: 51), TopicPartitionOffset("t", 1, offset: 4)]) == [TopicPartitionOffset("t", 1, offset: 4)])
        #expect(m.assignmentMade() == [TopicPartitionOffset("t", 0, offset: 50), TopicPartitionOffset("t", 0, offset: 51)])
        #expect(m.partitionsBeingAssigned.isEmpty)
        #expect(m.storeAssigned([TopicPartitionOffset("t", 0, offset: 52)]) == [TopicPartitionOffset("t", 0, offset: 52)])
    }

    @Test func closingEndsTheDemandRefusesChangesAndResumesEveryWaiterWithTheResult() {
        var m = Machine()
        _ = m.next(1, cancelled: false)
        _ = m.perform(.assign([]), done: 5)
        guard case .wait(let endDemand, let wake) = m.close(10) else { Issue.record("close waits"); return }
        #expect(endDemand == 1 && wake)
        #expect(m.isClosing)
        #expect(m.pollerStep(serving: true).isClose)
        guard case .end = m.next(2, cancelled: false) else { Issue.record("next() after close ends"); return }
        guard case .refuse(let error) = m.perform(.seek([]), done: 6) else { Issue.record("no change after close"); return }
        #expect(error.code == .closed)
        #expect(m.pollerFinishing() == [5])
        // Once the poll thread is finishing, a second close waits without waking it.
        guard case .wait(_, wake: false) = m.close(11) else { Issue.record("no wake-up while finishing"); return }
        let failure = KafkaError(code: .other, message: "commit failed")
        #expect(m.closed(failure) == [10, 11])
        guard case .closed(let result) = m.close(12) else { Issue.record("closed"); return }
        #expect(result?.message == "commit failed")
    }

    @Test func aFatalErrorFailsTheDemandAndEveryNextUntilAndAfterTheClose() {
        var m = Machine()
        _ = m.next(1, cancelled: false)
        let fatal = KafkaError(code: .other, message: "fenced")
        #expect(m.fail(fatal) == 1)
        guard case .fail(let e1) = m.next(2, cancelled: false) else { Issue.record("fails"); return }
        #expect(e1.message == "fenced")
        _ = m.close(3)
        _ = m.pollerFinishing()
        _ = m.closed(nil)
        guard case .fail(let e2) = m.next(4, cancelled: false) else { Issue.record("still fails after the close"); return }
        #expect(e2.message == "fenced")
    }

    @Test func aDeferredErrorIsThrownOnceByTheNextNext() {
        var m = Machine()
        m.deferError(KafkaError(code: .other, message: "first"))
        m.deferError(KafkaError(code: .other, message: "second"))
        guard case .fail(let e) = m.next(1, cancelled: false) else { Issue.record("thrown"); return }
        #expect(e.message == "first")
        guard case .wait = m.next(2, cancelled: false) else { Issue.record("once"); return }
    }

    @Test func aReleasedConsumerClosesWithoutAWaiter() {
        var m = Machine()
        _ = m.next(1, cancelled: false)
        #expect(m.requestClose() == 1)
        #expect(m.isClosing)
        #expect(m.requestClose() == nil)
        #expect(m.closed(nil).isEmpty)
    }
}

extension ConsumerStateMachine.PollerStep {
    var isClose: Bool { if case .close = self { true } else { false } }
    var isDeliver: Bool { if case .deliver = self { true } else { false } }
    var isWait: Bool { if case .wait = self { true } else { false } }
    var isServeCommands: Bool { if case .serveCommands = self { true } else { false } }
}
