import Crypto
import Foundation
import NIOSSL
import X509

/// A certificate for `localhost` and the CA that signed it, made when asked (P-256 keys that never
/// leave the process): what a local HTTPS server (the local APNs) serves, and what its clients
/// trust (``pem``, the CA, as their trust root: a CA file). BoringSSL, which the Swift clients
/// use, does not take a self-signed leaf as its own root, hence the two.
public struct TestCertificate: Sendable {
    /// The CA's certificate in PEM: the one trust root a client of the server needs.
    public let pem: String
    let leafPEM: String
    let keyPEM: String

    public init(validFor days: Int = 2) throws {
        let now = Date()
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName("pipeline test CA") }
        let ca = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(caKey.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(Double(days) * 86400),
            issuer: caName, subject: caName,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            },
            issuerPrivateKey: .init(caKey))
        let key = P256.Signing.PrivateKey()
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(Double(days) * 86400),
            issuer: caName, subject: try DistinguishedName { CommonName("localhost") },
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([.dnsName("localhost")])
            },
            issuerPrivateKey: .init(caKey))
        pem = try ca.serializeAsPEM().pemString
        leafPEM = try leaf.serializeAsPEM().pemString
        keyPEM = key.pemRepresentation
    }

    /// The server's side: the leaf certificate and its key.
    public var serverConfiguration: TLSConfiguration {
        get throws {
            TLSConfiguration.makeServerConfiguration(
                certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(leafPEM.utf8), format: .pem))],
                privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)))
        }
    }

    /// Writes the CA's certificate (no key) to `path`, for a client's CA-file option.
    public func writeTrustRoot(to path: String) throws {
        try pem.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
