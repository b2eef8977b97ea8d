// Package web is the control plane's read-only web view: the fleet, each
// node and each rollout, as pages for a person and as JSON, with the
// fleet's Prometheus series beside them at /metrics. It is an
// http.Handler that meshctl serve (--http-listen) runs; the listener and
// its TLS are package main's.
//
// Everything on its pages that a node said (its name's facts, resource
// ids, errors, labels, versions) is hostile input: pages are rendered by
// html/template, which escapes each value for the context it lands in
// (text, attribute, URL, SVG), under a Content-Security-Policy that runs
// no inline script and loads nothing from elsewhere.
//
// Every page and JSON endpoint asks for the operator's web token (meshctl
// web token): presented once on the login page and kept in an HttpOnly,
// SameSite=Strict cookie, or sent as a bearer token by a script or a
// scraper. /healthz is open; /metrics is open only when the operator
// says so. It changes nothing: actions stay with the CLI, which signs
// what it declares with the operator's name.
package web
