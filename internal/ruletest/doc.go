// Package ruletest holds the helpers shared by the tests of the rules
// packages under plugins/ and of the packages that check rules (core,
// registry): request builders and options, Random (the one generator of
// random requests of the tests, over a Domain of values), a table of cases
// checked through both a Decide function and the plugin's backend, and a
// check of a plugin's Describe answer.
//
// It is test support: only *_test.go files import it.
package ruletest
