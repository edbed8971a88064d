// Package corefacts holds the facts of the legacy BailingHub Core that the
// sidecar's decisions are written in, and nothing that does I/O:
//
//   - the domain values Core and its database hold ([Session], [Route],
//     [KnowledgeConfig], [Hit], [KB], [Document], [Run], the task snapshot);
//   - the error vocabulary every adapter reports in ([ErrUnavailable],
//     [ErrUnauthorized], [ErrNotFound], [ErrEndpointAbsent], [*CoreError], …),
//     classified with errors.Is / errors.As only;
//   - Core's rules the sidecar must apply exactly as Core does: the route-key
//     pattern ([ParseRouteKey], into a [RouteKey]), the document revision ([Revision]), the only
//     readable document status ([StatusReady]), the route's score filter as
//     Core's turn retrieval applies it, 0 staying 0 ([ScoreThreshold],
//     [KeepsScore]), id matching under
//     the database's collation ([SameID]).
//
// JavaScript's string rules (whitespace, trim) are in the subpackage
// jsstring. The adapters that talk to Core live beside it: coreclient (Core's
// HTTP API) and catalog (the read-only SQL view); package knowledge declares
// the interfaces it needs in these types (knowledge/ports.go).
package corefacts
