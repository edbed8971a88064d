// Package native decides whether the Core in front of which the sidecar runs
// serves the knowledge protocol itself (native detection, SPEC §8.2): what a
// capabilities answer says of Core's version (Classify), and the verdict
// held for one probe interval, shared by concurrent requests (Detector).
//
// It sends nothing itself and knows no HTTP server: a search, read or turn
// that finds no verdict held asks the Prober (coreclient in production) for
// Core's raw capabilities answer; a capabilities request, which the edge
// forwards to Core as the probe itself, claims the probe (Detector.Claim)
// and hands Core's answer back (Detector.Answer, or Detector.Fail when none
// could be read).
package native
