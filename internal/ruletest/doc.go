// Package ruletest holds the helpers shared by the tests of the rules
// packages under plugins/: request builders and options, a table of cases
// checked through both a Decide function and the plugin's backend, and a
// check of a plugin's Describe answer.
//
// It is test support: only *_test.go files import it.
package ruletest
