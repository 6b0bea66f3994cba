import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Operations

/// Every request passes here before the routes: with a token, every request but `/login`, the
/// static files, `/healthz` and the icon must carry it (`Authorization: Bearer TOKEN`, or the
/// cookie `/login` sets): a page request without it is sent to `/login`, anything else gets 401.
/// A parameter a route cannot take (``BadParameter``) is answered 400 with the reason.
struct Guarded<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
    typealias Context = BasicRequestContext
    let inner: Inner
    let token: [UInt8]?

    func respond(to request: Request, context: Context) async throws -> Response {
        do {
            guard let token else { return try await inner.respond(to: request, context: context) }
            return try await authorized(request, context: context, token: token)
        } catch let error as BadParameter {
            return ConsoleService.badRequest(error)
        }
    }

    private func authorized(_ request: Request, context: Context, token: [UInt8]) async throws -> Response {
        let path = request.uri.path
        if path == "/login" || path == "/healthz" || path == "/favicon.ico" || path.hasPrefix("/static/") { return try await inner.respond(to: request, context: context) }
        if let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer "),
            ConstantTime.equal(Array(authorization.dropFirst("Bearer ".count).utf8), token)
        {
            return try await inner.respond(to: request, context: context)
        }
        let expected = Array(SessionCookie.value(token).utf8)
        for cookie in (request.headers[.cookie] ?? "").split(separator: ";") {
            let parts = cookie.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2, parts[0] == SessionCookie.name, ConstantTime.equal(Array(parts[1].utf8), expected) {
                return try await inner.respond(to: request, context: context)
            }
        }
        var fields = ConsoleService.securityHeaders
        if request.method == .get, !path.hasPrefix("/api/") {
            fields[.location] = "/login"
            return Response(status: .seeOther, headers: fields)
        }
        fields[.wwwAuthenticate] = #"Bearer realm="console""#
        return Response(status: .unauthorized, headers: fields)
    }
}
