// Package config defines the sidecar's configuration: documented defaults,
// a strict YAML file, environment overrides for every field, secrets taken
// only from the environment or from files, and Validate, which reports every
// problem at once with its field path.
//
// Precedence, lowest first: Defaults(), the YAML file, environment variables.
// Every field's environment name is KNOWLEDGE_SIDECAR_ followed by its YAML
// path in upper case with dots turned into underscores (core.timeout →
// KNOWLEDGE_SIDECAR_CORE_TIMEOUT); EnvNames lists them all.
package config
