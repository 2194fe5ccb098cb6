// Validates an OpenAPI 3.1 document (FILE, or stdin without one or with "-") with the npm package
// @seriousme/openapi-schema-validator (installed by tests/service/fetch-validator into
// .deps/openapi-validator), then checks what that schema cannot: every $ref resolves, every
// operation has a unique operationId and lists its responses. Prints each error; exit 0 valid,
// 1 invalid, 2 usage or the validator is not installed.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const top = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const pkg = join(top, ".deps", "openapi-validator", "node_modules", "@seriousme",
    "openapi-schema-validator", "index.js");

function fail(errors) {
    for (const e of [].concat(errors)) {
        console.error(`validate-openapi: ${typeof e === "string" ? e : JSON.stringify(e)}`);
    }
    process.exit(1);
}

// Every "$ref" in @node, with where it is.
function refs(node, path, out) {
    if (Array.isArray(node)) {
        node.forEach((v, i) => refs(v, `${path}/${i}`, out));
    } else if (node !== null && typeof node === "object") {
        for (const [k, v] of Object.entries(node)) {
            if (k === "$ref" && typeof v === "string") {
                out.push([path, v]);
            } else {
                refs(v, `${path}/${k}`, out);
            }
        }
    }
    return out;
}

function pointer(doc, ref) {
    if (!ref.startsWith("#/")) {
        return undefined;
    }
    let node = doc;
    for (const raw of ref.slice(2).split("/")) {
        const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
        if (node === null || typeof node !== "object" || !(key in node)) {
            return undefined;
        }
        node = node[key];
    }
    return node;
}

function extraChecks(doc) {
    const errors = [];
    for (const [where, ref] of refs(doc, "#", [])) {
        if (pointer(doc, ref) === undefined) {
            errors.push(`${where}: $ref ${ref} does not resolve`);
        }
    }
    const ids = new Set();
    const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
    for (const [path, item] of Object.entries(doc.paths ?? {})) {
        for (const m of methods.filter((m) => item[m] !== undefined)) {
            const op = item[m];
            if (!op.operationId) {
                errors.push(`${m.toUpperCase()} ${path}: no operationId`);
            } else if (ids.has(op.operationId)) {
                errors.push(`${m.toUpperCase()} ${path}: operationId ${op.operationId} twice`);
            }
            ids.add(op.operationId);
            if (Object.keys(op.responses ?? {}).length === 0) {
                errors.push(`${m.toUpperCase()} ${path}: no responses`);
            }
        }
    }
    return errors;
}

const file = process.argv[2] ?? "-";
let text;
try {
    text = readFileSync(file === "-" ? 0 : file, "utf8");
} catch (e) {
    console.error(`validate-openapi: ${file}: ${e.message}`);
    process.exit(2);
}
let doc;
try {
    doc = JSON.parse(text);
} catch (e) {
    fail([`${file}: not JSON: ${e.message}`]);
}
if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
    fail([`${file}: not a JSON object`]);
}
if (typeof doc.openapi !== "string" || !doc.openapi.startsWith("3.1.")) {
    fail([`${file}: "openapi" is ${JSON.stringify(doc.openapi)}, expected 3.1.x`]);
}
let Validator;
try {
    ({ Validator } = await import(pathToFileURL(pkg).href));
} catch (e) {
    console.error(`validate-openapi: the validator is not installed (${pkg}): run scripts/setup`);
    process.exit(2);
}
const validator = new Validator();
const res = await validator.validate(doc);
if (!res.valid) {
    fail(res.errors);
}
const errors = extraChecks(doc);
if (errors.length > 0) {
    fail(errors);
}
console.log(`validate-openapi: ${file}: valid OpenAPI ${doc.openapi}`);
