// The tool namespace: tools.<provider>.<tool>(input) returns a promise of the tool's result;
// a failed call rejects with a SandboxToolError (ToolError, ValidationError, PolicyDenied).

export class SandboxToolError extends Error {
    constructor(error) {
        super(error.message);
        this.name = 'SandboxToolError';
        this.code = error.code; // "tool_error", "validation_error", "policy_denied", ...
        if (error.type)
            this.type = error.type; // the provider's own error type, if it gave one
        if (error.stack)
            this.remoteStack = error.stack;
    }
}

export class ToolError extends SandboxToolError {
    constructor(error) {
        super(error);
        this.name = 'ToolError';
    }
}

export class ValidationError extends SandboxToolError {
    constructor(error) {
        super(error);
        this.name = 'ValidationError';
    }
}

export class PolicyDenied extends SandboxToolError {
    constructor(error) {
        super(error);
        this.name = 'PolicyDenied';
    }
}

const BY_CODE = { tool_error: ToolError, validation_error: ValidationError,
    policy_denied: PolicyDenied };

// The error for a failed call; @site holds the stack of the call in the user's code.
export function toolError(error, site) {
    const Class = BY_CODE[error.code] ?? SandboxToolError;
    const e = new Class(error);
    e.stack = `${e.name}: ${e.message}\n${site.stack.split('\n').slice(1).join('\n')}`;
    return e;
}

// Build the namespace from execute.tools; @call(provider, name, input, site) does the work.
export function makeTools(decls, call) {
    const ns = Object.create(null);
    for (const { provider, name, description } of decls ?? []) {
        ns[provider] ??= Object.create(null);
        const fn = function (input) {
            const site = {};
            Error.captureStackTrace(site, fn);
            return call(provider, name, input === undefined ? {} : input, site);
        };
        Object.defineProperty(fn, 'name', { value: `${provider}.${name}` });
        if (description)
            fn.description = description;
        ns[provider][name] = Object.freeze(fn);
    }
    for (const p of Object.values(ns))
        Object.freeze(p);
    return Object.freeze(ns);
}
