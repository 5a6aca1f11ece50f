"""The shared vocabulary: errors, constants, status, names, quantities, clocks, printable
text, processes and the local environment's places. It imports nothing else of the
package, and every other package may import it. Nothing is imported here."""
