import Testing
@testable import Pipeline

/// The gate that keeps a worker that stood still past its session from checkpointing and
/// committing until the group has answered.
@Suite struct MembershipGateTests {
    @Test func aStandStillPastTheSessionMakesMembershipUnsureForAWindow() {
        let gate = MembershipGate(sessionTimeout: .seconds(1), heartbeat: .milliseconds(100))
        #expect(gate.window == .seconds(2))
        let t0 = ContinuousClock.now
        gate.ticked(now: t0 + .milliseconds(500))
        #expect(gate.unsure(now: t0 + .milliseconds(600)) == nil, "ticking along: sure")
        gate.ticked(now: t0 + .seconds(3))  // 2.5 s between two ticks: the process stood still
        #expect(gate.unsure(now: t0 + .milliseconds(3100)) == t0 + .seconds(5), "unsure for the window")
        #expect(gate.unsure(now: t0 + .milliseconds(3900)) == t0 + .seconds(5))
        gate.confirmed()  // a rebalance event: the coordinator answered
        #expect(gate.unsure(now: t0 + .milliseconds(3100)) == nil)
        #expect(gate.unsure(now: t0 + .milliseconds(4500)) != nil, "a stand-still the clock task has not noticed yet")
    }

    @Test func aRunningClockKeepsItSure() async {
        // A session far longer than any starvation of the test machine's cooperative pool (two
        // cores running parallel suites held tasks for seconds): only the gate's own logic can
        // make it unsure here. The clock task ticks every 500 ms; the loop spans three ticks.
        // (10 minutes: a fresh-clone CI run once held the clock task for over 60 s while every
        // suite started at once on two cores.)
        let gate = MembershipGate(sessionTimeout: .seconds(600), heartbeat: .milliseconds(10))
        let clock = Task { await gate.run() }
        for _ in 0..<4 {
            #expect(gate.unsure(now: .now) == nil)
            try? await Task.sleep(for: .milliseconds(400))  // the caller busy: no reason to doubt
        }
        #expect(gate.unsure(now: .now) == nil)
        gate.stop()
        await clock.value
    }
}
