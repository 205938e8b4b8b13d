// Package ratelimit applies the tenants' limits: requests per minute, tokens
// per minute and concurrent requests, per tenant and optionally per key and
// per model (issue 3; errors use the OpenAI error body, with Retry-After and
// x-ratelimit-* headers). Who a request is (its gateway key, the tenant the key
// belongs to, reloads of the tenants file) is package identity's, which builds
// on the configuration types defined here.
//
// Configuration: TenantConfig (the `tenants:` list) and BackendConfig (the
// `ratelimit:` section), validated by ValidateTenants and
// BackendConfig.Validate with messages that name the field path.
//
// Limits: a Limiter (Local, or Redis for several replicas) decides one
// Request at a time, all levels and kinds at once, charging everything or
// nothing. A Gate wraps it with metrics and the optional queue. Wiring, in
// outline:
//
//	gate, err := ratelimit.New(cfg.RateLimit, cfg.Tenants, registry)
//	store, err := identity.NewStore(cfg.Tenants, gate) // reloads reach the gate
//
//	// per request
//	key := identity.ExtractKey(authorizationHeader, xAPIKeyHeader)
//	info, ok := store.Lookup(key) // !ok: 401, outcome unauthorized
//	req := ratelimit.Request{Tenant: info.Tenant.Name, KeyID: info.ID, Model: model, NoModel: bodyNamesNoModel}
//	req.EstTokens, req.DefaultOutput = ratelimit.EstimateRequest(promptBytes, maxTokens, cfg.RateLimit.DefaultMaxTokens, outputs)
//	var d ratelimit.Decision
//	ticket, queued, err := gate.Admit(ctx, &req, &d) // queued is queue_ms
//	d.WriteHeaders(&resp.Header)                     // allowed or not
//	if !d.Allowed { status, msg, typ, code := d.ErrorInfo(req.Tenant); ... }
//	// ... for each event of a stream (a comparison until it outgrows its charge):
//	if !gate.Progress(&ticket, promptEstimate+outputSoFar) { /* cut it (on_overrun: cut) */ }
//	// ... when the response has ended, whatever the outcome:
//	gate.Reconcile(ctx, ticket, promptTokens+completionTokens)
package ratelimit
