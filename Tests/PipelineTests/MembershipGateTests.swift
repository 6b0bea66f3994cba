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
        // A session long enough that a loaded test machine does not starve the clock task past
        // it (400 ms was: parallel suites on two cores held it for seconds).
        let gate = MembershipGate(sessionTimeout: .seconds(3), heartbeat: .milliseconds(10))
        let clock = Task { await gate.run() }
        let start = ContinuousClock.now
        for _ in 0..<8 {
            await gate.waitUntilSure()
            try? await Task.sleep(for: .milliseconds(100))  // the caller busy: no reason to doubt
        }
        // Had it ever been unsure, waitUntilSure would have waited out the whole window.
        #expect(ContinuousClock.now - start < gate.window)
        gate.stop()
        await clock.value
    }
}
