// validate.mjs: check Kubernetes manifests against the API schemas that
// the kubernetes-models packages ship (Kubernetes core/apps/policy/
// networking, Prometheus Operator CRDs), offline.
//
//   node validate.mjs FILE.yaml...
//
// Every document needs apiVersion and kind; a kind with no schema here is
// an error, not a pass. Documents without apiVersion (a kustomization, a
// Prometheus config) must be left out by the caller. Prints one line per
// document ("ok FILE#N Kind/name" or "invalid ...: why"); exit 0 when all
// are valid, 1 otherwise, 2 on bad usage.
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';

// apiVersion -> the package path that holds its kinds.
function modulePath(apiVersion, kind) {
    if (apiVersion === 'monitoring.coreos.com/v1') {
        return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
    }
    return `kubernetes-models/${apiVersion}/${kind}`;
}

async function validate(file) {
    let bad = 0;
    const docs = parseAllDocuments(readFileSync(file, 'utf8'));
    for (const [i, d] of docs.entries()) {
        if (d.errors.length > 0) {
            console.log(`invalid ${file}#${i}: YAML: ${d.errors[0].message}`);
            bad++;
            continue;
        }
        const obj = d.toJS();
        if (obj === null) {
            continue;
        }
        const where = `${file}#${i} ${obj.kind}/${obj.metadata?.name}`;
        if (!obj.apiVersion || !obj.kind) {
            console.log(`invalid ${where}: no apiVersion or kind`);
            bad++;
            continue;
        }
        let Model;
        try {
            Model = (await import(modulePath(obj.apiVersion, obj.kind)))[obj.kind];
        } catch (e) {
            Model = undefined;
        }
        if (typeof Model !== 'function') {
            console.log(`invalid ${where}: no schema for ${obj.apiVersion} ${obj.kind}`);
            bad++;
            continue;
        }
        try {
            new Model(obj).validate();
            console.log(`ok ${where}`);
        } catch (e) {
            console.log(`invalid ${where}: ${e.message}`);
            bad++;
        }
    }
    return bad;
}

if (process.argv.length < 3) {
    console.error('usage: node validate.mjs FILE.yaml...');
    process.exit(2);
}
let bad = 0;
for (const f of process.argv.slice(2)) {
    bad += await validate(f);
}
process.exit(bad === 0 ? 0 : 1);
