import Crypto
import Foundation
import _CryptoExtras

/// JSON Web Tokens as the push providers take them: FCM's OAuth assertion signed with RS256
/// (the service account's RSA key), APNs' provider token with ES256 (a `.p8` P-256 key). The
/// one place that signs; the keys never leave it, and nothing here logs.
public enum JWT {
    public enum Algorithm: String, Sendable {
        case rs256 = "RS256"
        case es256 = "ES256"
    }

    /// A key that signs, read from PEM. Throws a ``PushConfigurationError`` naming what is wrong.
    public enum SigningKey: Sendable {
        case rsa(_RSA.Signing.PrivateKey)
        case p256(P256.Signing.PrivateKey)

        public var algorithm: Algorithm {
            switch self {
            case .rsa: .rs256
            case .p256: .es256
            }
        }

        /// An RSA key (PKCS#8 `BEGIN PRIVATE KEY`, as a service-account file holds, or PKCS#1).
        public static func rsa(pem: String, source: String) throws(PushConfigurationError) -> SigningKey {
            do { return .rsa(try _RSA.Signing.PrivateKey(pemRepresentation: pem)) } catch {
                throw PushConfigurationError("\(source): not an RSA private key in PEM (\(type(of: error)))")
            }
        }

        /// A P-256 key (an APNs `.p8` file: PKCS#8 PEM).
        public static func p256(pem: String, source: String) throws(PushConfigurationError) -> SigningKey {
            do { return .p256(try P256.Signing.PrivateKey(pemRepresentation: pem)) } catch {
                throw PushConfigurationError("\(source): not a P-256 private key in PEM (\(type(of: error)))")
            }
        }
    }

    /// `header.claims.signature`, each base64url without padding. `header` gets `alg` and `typ`
    /// (and whatever `extraHeader` adds, such as APNs' `kid`); `claims` are written as given,
    /// keys sorted, so the same input gives the same token.
    public static func sign(claims: [String: ClaimValue], extraHeader: [String: String] = [:], key: SigningKey) throws -> String {
        var header: [String: ClaimValue] = ["alg": .text(key.algorithm.rawValue), "typ": .text("JWT")]
        for (name, value) in extraHeader { header[name] = .text(value) }
        let input = base64URL(json(header)) + "." + base64URL(json(claims))
        let data = Data(input.utf8)
        let signature: Data
        switch key {
        case .rsa(let k): signature = try k.signature(for: data, padding: .insecurePKCS1v1_5).rawRepresentation
        // JWS takes ES256 as r ‖ s, 64 bytes (not DER).
        case .p256(let k): signature = try k.signature(for: data).rawRepresentation
        }
        return input + "." + base64URL(Array(signature))
    }

    /// A claim or header value: text or a whole number.
    public enum ClaimValue: Sendable, Hashable {
        case text(String)
        case number(Int64)
    }

    static func json(_ object: [String: ClaimValue]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (i, name) in object.keys.sorted().enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            appendString(name, to: &out)
            out.append(UInt8(ascii: ":"))
            switch object[name]! {
            case .text(let s): appendString(s, to: &out)
            case .number(let n): out += Array(String(n).utf8)
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    private static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
            case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
            case 0..<0x20: out += Array(String(format: "\\u%04x", b).utf8)
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    public static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// A push sender's configuration that cannot be used: the message names the option or file.
public struct PushConfigurationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
