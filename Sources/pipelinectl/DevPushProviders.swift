import Foundation
import HTTPTesting
import Pipeline
import Push
import Workers

/// `pipelinectl dev`'s stand-ins for FCM and APNs: the local providers the tests use (a token
/// endpoint and `messages:send`; HTTP/2 over TLS with a certificate made at start), with keys
/// made for the session and written to a private folder. The push workers find them through the
/// environment (`PIPELINE_FCM_*`, `PIPELINE_APNS_*`), so the topology stays the production one.
final class DevPushProviders {
    let fcm: FakeFCM
    let apns: FakeAPNs
    let folder: String
    /// What a push worker's environment adds.
    let environment: [String: String]

    static func start(topology: Topology) async throws -> DevPushProviders {
        let apnsOptions = topology.stages.first { $0.chain == [APNsSender.transformName] }?.options.push ?? PushOptions()
        let fcm = try await FakeFCM.start(project: "pipeline-dev")
        let apns = try await FakeAPNs.start(
            bundleID: apnsOptions.apnsBundleID ?? "com.example.pipeline", teamID: apnsOptions.apnsTeamID ?? "DEVTEAM123",
            keyID: apnsOptions.apnsKeyID ?? "DEVKEY1234")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-dev-push-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let credentials = folder + "/fcm-service-account.json"
        let key = folder + "/AuthKey.p8"
        let ca = folder + "/apns-ca.pem"
        _ = FileManager.default.createFile(atPath: credentials, contents: Data(fcm.serviceAccountJSON), attributes: [.posixPermissions: 0o600])
        _ = FileManager.default.createFile(atPath: key, contents: Data(apns.keyP8.utf8), attributes: [.posixPermissions: 0o600])
        try apns.certificate.writeTrustRoot(to: ca)
        return DevPushProviders(fcm: fcm, apns: apns, folder: folder, environment: [
            FCMSender.credentialsEnvironment: credentials, FCMSender.endpointEnvironment: fcm.server.baseURL,
            APNsSender.keyEnvironment: key, APNsSender.endpointEnvironment: apns.server.baseURL, APNsSender.caFileEnvironment: ca,
        ])
    }

    private init(fcm: FakeFCM, apns: FakeAPNs, folder: String, environment: [String: String]) {
        self.fcm = fcm
        self.apns = apns
        self.folder = folder
        self.environment = environment
    }

    func close() async {
        try? await fcm.server.close()
        try? await apns.server.close()
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// The summary's lines: what reached each provider, and one notification as a phone shows it
    /// (one with an image when there is one).
    /// `retried`: the senders' attempts that were tried again (their metrics).
    func summary(retried: Int) -> [String] {
        let fcmSent = fcm.sent, apnsSent = apns.sent
        var lines = [
            "push: \(fcmSent.count) notifications reached FCM (\(Set(fcm.sentDedupeKeys).count) distinct), "
                + "\(apnsSent.count) reached APNs (\(Set(apns.sentDedupeKeys).count) distinct); \(retried) attempts retried"
        ]
        // What went out twice (a worker that died or lost its partitions mid-send; docs/push.md):
        // the keys, for whoever looks into it.
        for (provider, keys) in [("FCM", fcm.sentDedupeKeys), ("APNs", apns.sentDedupeKeys)] {
            var counts: [String: Int] = [:]
            for k in keys { counts[k, default: 0] += 1 }
            let repeated = counts.filter { $0.value > 1 }.sorted { $0.key < $1.key }
            if !repeated.isEmpty {
                lines.append("push: sent to \(provider) more than once: " + repeated.prefix(5).map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
                    + (repeated.count > 5 ? ", …" : ""))
            }
        }
        let shown = fcmSent.compactMap { sent -> (title: String, body: String, image: String?)? in
            guard let n = (sent.body["message"] as? [String: Any])?["notification"] as? [String: Any], let title = n["title"] as? String else { return nil }
            return (title, n["body"] as? String ?? "", n["image"] as? String)
        }
        if let phone = shown.first(where: { $0.image != nil }) ?? shown.first {
            lines.append("on a phone: \(phone.title) | \(phone.body)" + (phone.image.map { " | image \($0)" } ?? ""))
        }
        if let iphone = apnsSent.first {
            let alert = (iphone.json["aps"] as? [String: Any])?["alert"] as? [String: Any]
            lines.append("on an iPhone: \(alert?["title"] as? String ?? "?") | \(alert?["body"] as? String ?? "")"
                + ((iphone.json["image"] as? String).map { " | image \($0)" } ?? ""))
        }
        return lines
    }
}
